"""MC-Bench training data: multi-image grounding instructions synthesised from detection sets
(`needlepoint build mc_bench_sft`), in the eval prompt's wording and answer schema, for
LLaMA-Factory (ShareGPT) or ms-swift (JSONL). See docs/training-data.md.

Modules, one job each: coco (reading a detection file), refs (referring expressions), pairs (the
pair drawing rule), templates (kinds, shares, description templates), draw (one sample), answers
(answer text), dedup (decontamination), mix (--mix samples), writers (output formats), builder
(the whole build and its manifest), command (the command-line flags).
"""
