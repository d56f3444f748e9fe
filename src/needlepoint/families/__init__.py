"""Model families: how each one grounds (its prompt, answer syntax, box format, frame, limits), with
the source of each rule. `catalog` holds the families, `syntax` the reading and writing of a box
syntax shared by all, `syntaxes` each family's syntax. A family knows no benchmark: benchmarks
read their boxes through it (contract/grounding.py)."""

from needlepoint.families.catalog import AUTHORS_FAMILY, FAMILIES, JSON, Family, family, family_names
from needlepoint.families.syntax import Found, GroundedBox, Malformed, Syntax
from needlepoint.families.syntaxes import SYNTAXES

__all__ = [
    "AUTHORS_FAMILY",
    "FAMILIES",
    "JSON",
    "SYNTAXES",
    "Family",
    "Found",
    "GroundedBox",
    "Malformed",
    "Syntax",
    "family",
    "family_names",
]
