"""The benchmark packages, one per benchmark (`mc_bench`, `ref_adv`, `mm_niah`): each implements the
contract (`needlepoint.contract`) and imports no sibling. The registry that finds them by name is
`needlepoint.contract.registry`."""
