"""The bootstrap's memory is flat in the run's size (issue 45 item 3): draws are made and scored a
block of resamples at a time, a run whose metrics are all shares (Ref-Adv-s) draws nothing, and
the intervals are the same numbers as before that change, for the same seed. The pinned values
below were printed by the code before the change (commit 215459f: one resamples x n int64 matrix,
scored in batches of 4,000,000 positions), for these very inputs."""

from __future__ import annotations

import hashlib
import random
import tracemalloc
from typing import Any

import numpy as np
import pytest
from helpers import MC_BENCH_RELEASE, TEST_DATA

from needlepoint.benchmarks.mc_bench.groundtruth import load_groundtruth
from needlepoint.benchmarks.mc_bench.resample import McResampler
from needlepoint.benchmarks.mc_bench.scoring import read_results
from needlepoint.benchmarks.mm_niah.ranges import TASKS
from needlepoint.benchmarks.mm_niah.resample import NiahResampler
from needlepoint.benchmarks.ref_adv.resample import RefAdvResampler
from needlepoint.stats import Intervals, Resampler, bootstrap_interval, draw
from needlepoint.stats.bootstrap import block_rows, draws, resampled

# sha256 (first 16 hex digits) of draw(n, resamples, seed, strata) as int64, keyed n-resamples-seed-strata
DRAWS = {
    "50-20-3-None": "2aaa313195630edc",
    "1000-30-5-3": "00ca80da4820d9e0",
    "7-9-11-1": "69e98512957d317f",
    "0-4-0-None": "e3b0c44298fc1c14",
    "6000-700-2-4": "25d25a00b626c816",
}
PINNED: dict[str, dict[str, tuple[float, float, float, int, str] | None]] = {
    "ref_adv_shares": {
        "acc@0.5": (0.503, 0.4903508429699861, 0.5156453180290872, 0, "Wilson score"),
        "acc@0.75": (0.2545, 0.24363799923547752, 0.26567615900702396, 0, "Wilson score"),
        "acc@0.9": (0.10233333333333333, 0.09491700940522302, 0.11025853816206047, 0, "Wilson score"),
        "bins/2-3/acc@0.5": (0.48626925653047554, 0.4609843144566762, 0.5116246751204148, 0, "Wilson score"),
        "bins/4-6/acc@0.5": (0.5182350292660963, 0.49744102502659904, 0.5389660635229532, 0, "Wilson score"),
        "bins/>=7/acc@0.5": (0.4991251093613298, 0.4786472951697953, 0.5196058590018213, 0, "Wilson score"),
    },
    "ref_adv_percentile": {
        "acc@0.5": (0.503, 0.48999166666666666, 0.5156708333333334, 1000, "percentile"),
        "acc@0.75": (0.2545, 0.24283333333333335, 0.26566666666666666, 1000, "percentile"),
        "acc@0.9": (0.10233333333333333, 0.09499166666666667, 0.11, 1000, "percentile"),
        "bins/2-3/acc@0.5": (0.48626925653047554, 0.45880776959142666, 0.5117213663764233, 1000, "percentile"),
        "bins/4-6/acc@0.5": (0.5182350292660963, 0.4961616389013958, 0.5389576767221972, 1000, "percentile"),
        "bins/>=7/acc@0.5": (0.4991251093613298, 0.4776793525809274, 0.5210083114610674, 1000, "percentile"),
    },
    "mm_niah": {
        "tasks/reasoning-image/scores/1k": (0.4875, 0.232134075, 0.7316776, 1000, "percentile"),
        "tasks/reasoning-image/scores/2k": (0.39, 0.14167122500000018, 0.6117592, 1000, "percentile"),
        "tasks/reasoning-image/scores/4k": (0.454167, 0.30019492500000006, 0.6121852249999998, 1000, "percentile"),
        "tasks/reasoning-image/scores/8k": (0.511111, 0.31009697500000005, 0.674175125, 1000, "percentile"),
        "tasks/reasoning-image/scores/12k": (0.621429, 0.41199, 0.7962215, 1000, "percentile"),
        "tasks/reasoning-image/scores/16k": (0.435154, 0.3194122, 0.559331, 1000, "percentile"),
        "tasks/reasoning-image/scores/24k": (0.562727, 0.42015050000000004, 0.7041326, 1000, "percentile"),
        "tasks/reasoning-image/scores/32k": (0.450893, 0.25956927500000004, 0.6517831249999999, 1000, "percentile"),
        "tasks/reasoning-image/scores/40k": (0.392014, 0.29842085, 0.49153825, 1000, "percentile"),
        "tasks/reasoning-image/scores/48k": (0.555493, 0.46689765, 0.647070025, 1000, "percentile"),
        "tasks/reasoning-image/scores/64k": (0.435152, 0.28792320000000005, 0.5849743, 1000, "percentile"),
        "tasks/reasoning-image/overall": (0.481422, 0.42485280000000003, 0.53405285, 1000, "percentile"),
        "tasks/counting-image/scores/1k": (0.445833, 0.2602272500000001, 0.6202852249999999, 1000, "percentile"),
        "tasks/counting-image/scores/2k": (0.575, 0.2953911250000001, 0.8251837, 1000, "percentile"),
        "tasks/counting-image/scores/4k": (0.361111, 0.158564125, 0.56153925, 1000, "percentile"),
        "tasks/counting-image/scores/8k": (0.562879, 0.363038025, 0.7432853999999999, 1000, "percentile"),
        "tasks/counting-image/scores/12k": (0.704167, 0.500863175, 0.9076875999999999, 1000, "percentile"),
        "tasks/counting-image/scores/16k": (0.513214, 0.383228925, 0.619733525, 1000, "percentile"),
        "tasks/counting-image/scores/24k": (0.598016, 0.45624955, 0.74129485, 1000, "percentile"),
        "tasks/counting-image/scores/32k": (0.594167, 0.45681095, 0.7247816, 1000, "percentile"),
        "tasks/counting-image/scores/40k": (0.594524, 0.461003425, 0.7207889999999999, 1000, "percentile"),
        "tasks/counting-image/scores/48k": (0.602876, 0.44670497500000006, 0.7598325499999999, 1000, "percentile"),
        "tasks/counting-image/scores/64k": (0.691667, 0.54042065, 0.8318083249999999, 1000, "percentile"),
        "tasks/counting-image/overall": (0.567587, 0.5118974250000001, 0.6216290250000001, 1000, "percentile"),
        "tasks/retrieval-text/scores/1k": (0.016667, -0.1826658, 0.21291664999999996, 1000, "percentile"),
        "tasks/retrieval-text/scores/2k": (0.466667, 0.29480622500000003, 0.6355468750000001, 1000, "percentile"),
        "tasks/retrieval-text/scores/4k": (0.40625, 0.26533765000000004, 0.538975975, 1000, "percentile"),
        "tasks/retrieval-text/scores/8k": (0.541667, 0.3860111, 0.6842311499999999, 1000, "percentile"),
        "tasks/retrieval-text/scores/12k": (0.678175, 0.48361952500000005, 0.860520375, 1000, "percentile"),
        "tasks/retrieval-text/scores/16k": (0.606424, 0.47807015, 0.743325075, 1000, "percentile"),
        "tasks/retrieval-text/scores/24k": (0.6675, 0.521228725, 0.8153888, 1000, "percentile"),
        "tasks/retrieval-text/scores/32k": (0.38974, 0.29626657500000003, 0.48434394999999997, 1000, "percentile"),
        "tasks/retrieval-text/scores/40k": (0.580812, 0.420642125, 0.7390846249999999, 1000, "percentile"),
        "tasks/retrieval-text/scores/48k": (0.499479, 0.40094865, 0.59764975, 1000, "percentile"),
        "tasks/retrieval-text/scores/64k": (0.5625, 0.405314675, 0.7590533249999999, 1000, "percentile"),
        "tasks/retrieval-text/overall": (0.492353, 0.44867025, 0.537979275, 1000, "percentile"),
        "tasks/retrieval-image/scores/1k": (0.4, 0.15816092500000004, 0.6345000499999999, 1000, "percentile"),
        "tasks/retrieval-image/scores/2k": (0.6875, 0.41525957500000005, 0.97172255, 1000, "percentile"),
        "tasks/retrieval-image/scores/4k": (0.546212, 0.395975325, 0.6909142249999999, 1000, "percentile"),
        "tasks/retrieval-image/scores/8k": (0.297917, 0.12334897500000003, 0.5009273, 1000, "percentile"),
        "tasks/retrieval-image/scores/12k": (0.454167, 0.30453482500000006, 0.5833107999999999, 1000, "percentile"),
        "tasks/retrieval-image/scores/16k": (0.439912, 0.299850675, 0.58381655, 1000, "percentile"),
        "tasks/retrieval-image/scores/24k": (0.631183, 0.4517544, 0.8134637499999999, 1000, "percentile"),
        "tasks/retrieval-image/scores/32k": (0.661742, 0.52271725, 0.7964896, 1000, "percentile"),
        "tasks/retrieval-image/scores/40k": (0.583155, 0.44954392500000007, 0.7188515999999999, 1000, "percentile"),
        "tasks/retrieval-image/scores/48k": (0.558271, 0.45731160000000004, 0.649377525, 1000, "percentile"),
        "tasks/retrieval-image/scores/64k": (0.632137, 0.46429182500000005, 0.8012205, 1000, "percentile"),
        "tasks/retrieval-image/overall": (0.535654, 0.48501855, 0.5943396999999999, 1000, "percentile"),
        "tasks/counting-text/scores/1k": (0.565, 0.29371255000000007, 0.8406853499999999, 1000, "percentile"),
        "tasks/counting-text/scores/2k": (0.441667, 0.229662625, 0.663306925, 1000, "percentile"),
        "tasks/counting-text/scores/4k": (0.377619, 0.19780160000000002, 0.561658525, 1000, "percentile"),
        "tasks/counting-text/scores/8k": (0.365, 0.26207795, 0.46805744999999993, 1000, "percentile"),
        "tasks/counting-text/scores/12k": (0.44625, 0.319781275, 0.5782489999999999, 1000, "percentile"),
        "tasks/counting-text/scores/16k": (0.524078, 0.36347062500000005, 0.6773439749999999, 1000, "percentile"),
        "tasks/counting-text/scores/24k": (0.565122, 0.413963075, 0.711873575, 1000, "percentile"),
        "tasks/counting-text/scores/32k": (0.656628, 0.50136575, 0.7906648749999999, 1000, "percentile"),
        "tasks/counting-text/scores/40k": (0.478968, 0.3462940750000001, 0.6144647249999999, 1000, "percentile"),
        "tasks/counting-text/scores/48k": (0.50557, 0.40682375, 0.601114625, 1000, "percentile"),
        "tasks/counting-text/scores/64k": (0.373214, 0.25522475000000006, 0.490486375, 1000, "percentile"),
        "tasks/counting-text/overall": (0.481738, 0.43226465000000003, 0.5294548499999999, 1000, "percentile"),
        "tasks/reasoning-text/scores/1k": (0.4, 0.12183172500000002, 0.6777641, 1000, "percentile"),
        "tasks/reasoning-text/scores/2k": (0.593333, 0.39464592500000006, 0.7831504749999999, 1000, "percentile"),
        "tasks/reasoning-text/scores/4k": (0.519683, 0.313820975, 0.7266485749999999, 1000, "percentile"),
        "tasks/reasoning-text/scores/8k": (0.645139, 0.4826318, 0.8348115749999999, 1000, "percentile"),
        "tasks/reasoning-text/scores/12k": (0.399167, 0.1916189250000002, 0.6253442249999999, 1000, "percentile"),
        "tasks/reasoning-text/scores/16k": (0.594549, 0.4119099, 0.763163175, 1000, "percentile"),
        "tasks/reasoning-text/scores/24k": (0.570635, 0.41141655000000005, 0.7620884499999999, 1000, "percentile"),
        "tasks/reasoning-text/scores/32k": (0.596667, 0.4863448, 0.70326525, 1000, "percentile"),
        "tasks/reasoning-text/scores/40k": (0.580833, 0.374869575, 0.760861425, 1000, "percentile"),
        "tasks/reasoning-text/scores/48k": (0.517221, 0.43487015, 0.6096121999999999, 1000, "percentile"),
        "tasks/reasoning-text/scores/64k": (0.424242, 0.253622875, 0.5869565250000001, 1000, "percentile"),
        "tasks/reasoning-text/overall": (0.531043, 0.470819675, 0.58520425, 1000, "percentile"),
        "overall/scores/1k": (0.385833, 0.28861267500000004, 0.48909525, 1000, "percentile"),
        "overall/scores/2k": (0.525694, 0.42917720000000004, 0.62513895, 1000, "percentile"),
        "overall/scores/4k": (0.444174, 0.372205675, 0.51854555, 1000, "percentile"),
        "overall/scores/8k": (0.487285, 0.419103325, 0.56192015, 1000, "percentile"),
        "overall/scores/12k": (0.550559, 0.47046882500000003, 0.628357125, 1000, "percentile"),
        "overall/scores/16k": (0.518888, 0.46279902500000003, 0.5799133999999999, 1000, "percentile"),
        "overall/scores/24k": (0.599197, 0.534338325, 0.66449705, 1000, "percentile"),
        "overall/scores/32k": (0.558306, 0.50111855, 0.619672025, 1000, "percentile"),
        "overall/scores/40k": (0.535051, 0.474230925, 0.596757325, 1000, "percentile"),
        "overall/scores/48k": (0.539818, 0.492899875, 0.58325075, 1000, "percentile"),
        "overall/scores/64k": (0.519819, 0.4545279, 0.582506575, 1000, "percentile"),
        "overall/overall": (0.514966, 0.4934009, 0.53727205, 1000, "percentile"),
    },
    "mc_bench": {
        "official/acc": (0.8585, 0.8421216050045033, 0.8734346551096057, 0, "Wilson score"),
        "official/ap50": (0.6562401387740078, 0.6393485443185717, 0.6823768244970847, 1000, "percentile"),
        "corrected/acc": (0.8585, 0.8421216050045033, 0.8734346551096057, 0, "Wilson score"),
        "corrected/ap50": (0.6566212175650921, 0.6400904420337947, 0.6827607795356928, 1000, "percentile"),
        "official/by_style/Referring/acc": (0.791907514450867, 0.7455342731159016, 0.8317371361986525, 0, "Wilson score"),
        "official/by_style/Referring/ap50": (0.5883253268474653, 0.5436526539013061, 0.6506148487054784, 1000, "percentile"),
        "analyses/by_style/Referring/acc": (0.791907514450867, 0.7455342731159016, 0.8317371361986525, 0, "Wilson score"),
        "analyses/by_style/Referring/ap50": (0.5883253268474653, 0.5436526539013061, 0.6506148487054784, 1000, "percentile"),
        "official/by_style/Comparison/acc": (0.8654320987654321, 0.8396039382811333, 0.8876577137635271, 0, "Wilson score"),
        "official/by_style/Comparison/ap50": (0.6869763953270301, 0.6606432893061286, 0.720439893915087, 1000, "percentile"),
        "analyses/by_style/Comparison/acc": (0.8654320987654321, 0.8396039382811333, 0.8876577137635271, 0, "Wilson score"),
        "analyses/by_style/Comparison/ap50": (0.6869763953270301, 0.6606432893061286, 0.720439893915087, 1000, "percentile"),
        "official/by_style/Reasoning/acc": (0.8791469194312796, 0.8553661687652219, 0.8994771388207681, 0, "Wilson score"),
        "official/by_style/Reasoning/ap50": (0.6544852362630768, 0.6272345701735926, 0.696710387193747, 1000, "percentile"),
        "analyses/by_style/Reasoning/acc": (0.8791469194312796, 0.8553661687652219, 0.8994771388207681, 0, "Wilson score"),
        "analyses/by_style/Reasoning/ap50": (0.6552827239176702, 0.6282392537913983, 0.6985619522876491, 1000, "percentile"),
    },
    "mc_bench_tied": {
        "official/acc": (0.8585, 0.8421216050045033, 0.8734346551096057, 0, "Wilson score"),
        "official/ap50": (0.6726817469652621, 0.6570448448834916, 0.6988436215369843, 1000, "percentile"),
        "corrected/acc": (0.8585, 0.8421216050045033, 0.8734346551096057, 0, "Wilson score"),
        "corrected/ap50": (0.6575208019227786, 0.6419127902507534, 0.6838184174563501, 1000, "percentile"),
        "official/by_style/Referring/acc": (0.791907514450867, 0.7455342731159016, 0.8317371361986525, 0, "Wilson score"),
        "official/by_style/Referring/ap50": (0.617797846575327, 0.575314511439085, 0.6772181062374429, 1000, "percentile"),
        "analyses/by_style/Referring/acc": (0.791907514450867, 0.7455342731159016, 0.8317371361986525, 0, "Wilson score"),
        "analyses/by_style/Referring/ap50": (0.5936427724377648, 0.5486668653067679, 0.6531596947178036, 1000, "percentile"),
        "official/by_style/Comparison/acc": (0.8654320987654321, 0.8396039382811333, 0.8876577137635271, 0, "Wilson score"),
        "official/by_style/Comparison/ap50": (0.7089349333451429, 0.6832327503324453, 0.7444745364767069, 1000, "percentile"),
        "analyses/by_style/Comparison/acc": (0.8654320987654321, 0.8396039382811333, 0.8876577137635271, 0, "Wilson score"),
        "analyses/by_style/Comparison/ap50": (0.6900852162318104, 0.6640296848840841, 0.723192058413148, 1000, "percentile"),
        "official/by_style/Reasoning/acc": (0.8791469194312796, 0.8553661687652219, 0.8994771388207681, 0, "Wilson score"),
        "official/by_style/Reasoning/ap50": (0.6593440617774482, 0.6299264379941587, 0.7044543923309927, 1000, "percentile"),
        "analyses/by_style/Reasoning/acc": (0.8791469194312796, 0.8553661687652219, 0.8994771388207681, 0, "Wilson score"),
        "analyses/by_style/Reasoning/ap50": (0.6532089290732527, 0.6266961734609018, 0.6969553269061493, 1000, "percentile"),
    },
}


def _strata(n: int, k: int | None, seed: int) -> list[str] | None:
    rng = random.Random(seed)
    return [f"s{rng.randrange(k)}" for _ in range(n)] if k else None


def _ref_adv(n: int, seed: int) -> RefAdvResampler:
    rng = np.random.default_rng(seed)
    return RefAdvResampler([str(i) for i in range(n)], rng.random(n).tolist(), rng.integers(2, 10, n).tolist())


def _niah_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        depth: float | list[float] = rng.choice([0.0, 0.2, 0.4, 0.6, 0.8, 1.0, rng.random()])
        if rng.random() < 0.1:
            depth = [rng.random(), rng.random()]
        task = rng.choice(TASKS)  # drawn in this order: the pinned values are of these rows
        length = rng.choice([500, rng.randint(1000, 70000)])
        out.append(
            {"task": task, "context_length": length, "placed_depth": depth, "score": rng.choice([0.0, 1.0, 1.0, 0.5, 0.25])}
        )
    return out


def _resampler(case: str) -> tuple[Resampler, int]:
    """The pinned case's resampler and seed (1,000 resamples at 95% each)."""
    if case == "ref_adv_shares":
        return _ref_adv(6000, 1), 0
    if case == "ref_adv_percentile":  # restricted: declares no shares, so every metric is drawn (two batches of the old code)
        r = _ref_adv(6000, 1)
        return r.restrict(r.units), 4
    if case == "mm_niah":  # 5,000 samples: two batches of 800 resamples in the old code
        return NiahResampler([str(i) for i in range(5000)], _niah_rows(5000, 8)), 0
    gt = load_groundtruth(MC_BENCH_RELEASE)
    results = read_results(TEST_DATA / "mc-bench" / "perturbed_noswap_result.json")
    if case == "mc_bench_tied":  # every score 1.0: the corrected AP50 averages tie orders by a draw's row
        results = [{**r, "score": 1.0} for r in results]
    return McResampler(gt, results, [s.id for s in gt.samples]), 0


def _packed(intervals: Intervals) -> dict[str, tuple[float, float, float, int, str] | None]:
    return {k: None if v is None else (v.estimate, v.lo, v.hi, v.resamples, v.method) for k, v in intervals.items()}


@pytest.mark.parametrize("key", sorted(DRAWS))
def test_draws_are_the_numbers_drawn_before(key: str) -> None:
    n, resamples, seed, k = key.split("-")
    drawn = draw(int(n), int(resamples), int(seed), _strata(int(n), None if k == "None" else int(k), int(seed)))
    assert drawn.shape == (int(n), int(resamples))[::-1]
    assert hashlib.sha256(np.ascontiguousarray(drawn, dtype=np.int64).tobytes()).hexdigest()[:16] == DRAWS[key]


@pytest.mark.parametrize("case", sorted(PINNED))
def test_intervals_are_the_numbers_of_before(case: str) -> None:
    """Every interval of every metric, to the last bit, as the code before the blocks gave it."""
    resampler, seed = _resampler(case)
    assert _packed(bootstrap_interval(resampler, 1000, 0.95, seed)) == PINNED[case]


def test_blocks_are_whole_multiples_of_the_step_and_bounded() -> None:
    """A block is a multiple of 32 resamples (MC-Bench's tie orders go by a row's place in its
    block, modulo 8), holds about 2^18 positions, and all the resamples when fewer are asked."""
    assert block_rows(1459, 1000) == 160 and block_rows(25_600, 1000) == 32 and block_rows(10, 1000) == 1000
    assert block_rows(10**6, 5) == 5
    sizes = [len(b) for b in draws(25_600, 1000, 0, _strata(25_600, 3, 0))]
    assert sizes == [32] * 31 + [8]


def test_a_comparisons_draw_is_kept_in_the_smallest_type() -> None:
    """draw() holds every resample (a paired comparison scores two runs on them): uint16 below
    65,537 units, a quarter of int64's memory, the same positions."""
    assert draw(300, 5, 0).dtype == np.uint16 and draw(200, 5, 0).dtype == np.uint8 and draw(70_000, 2, 0).dtype == np.uint32
    small = draw(300, 70, 3, _strata(300, 4, 1))
    assert np.array_equal(small, np.concatenate(list(draws(300, 70, 3, _strata(300, 4, 1)))))
    r = _ref_adv(300, 2).restrict([str(i) for i in range(300)])
    wide = resampled(r, small.astype(np.int64))
    narrow = resampled(r, small)
    assert wide.keys() == narrow.keys() and all(np.array_equal(wide[k], narrow[k], equal_nan=True) for k in wide)


def _peak_mb(call: Any) -> float:
    """The most memory traced (numpy's arrays included) while `call()` runs, above what was held
    before, in MB."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        call()
        return (tracemalloc.get_traced_memory()[1] - before) / 1e6
    finally:
        tracemalloc.stop()


def test_intervals_of_a_large_run_hold_a_block_not_the_run() -> None:
    """25,600 cases, 400 resamples within strata, every metric drawn (the restricted view): the
    intervals hold at most a few blocks (under 50 MB); one matrix of all the draws was 82 MB of
    int64 positions, with 82 MB of uniform numbers and 82 MB of picks beside it."""
    r = _ref_adv(25_600, 3)
    every = r.restrict(r.units)
    assert every.strata is not None
    got: dict[str, Intervals] = {}
    peak = _peak_mb(lambda: got.setdefault("iv", bootstrap_interval(every, 400, 0.95, 0)))
    assert got["iv"]["acc@0.5"] is not None and got["iv"]["acc@0.5"].method == "percentile"
    assert peak < 50, peak


def test_a_run_of_share_metrics_only_draws_nothing() -> None:
    """Ref-Adv-s declares every metric a share (Wilson score intervals): no resample is drawn, so
    the intervals of 25,600 cases at 1,000 resamples hold almost nothing."""
    r = _ref_adv(25_600, 4)
    got: dict[str, Intervals] = {}
    peak = _peak_mb(lambda: got.setdefault("iv", bootstrap_interval(r, 1000, 0.95, 0)))
    assert all(iv is not None and iv.resamples == 0 for iv in got["iv"].values())
    assert peak < 5, peak
