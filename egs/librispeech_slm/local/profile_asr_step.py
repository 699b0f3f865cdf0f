#!/usr/bin/env python3
"""Where an ASR training step's CPU time goes, and what bf16 autocast does to it.

Builds the ESPnet ASR model of a training experiment's config.yaml (fresh weights: only the shape
matters), takes the first `--batches` batches of `--batch-utts` utterances of a data dir, and trains on
them (forward, backward, Adam) once untimed, then `--reps` times per dtype, the dtypes interleaved; it
prints the median seconds of a pass per dtype, then the top operators of one float32 pass under
torch.profiler. Run it from the recipe directory (config.yaml's paths are relative to it):

    python local/profile_asr_step.py --config mini/exp/asr_train_asr_mini_raw_en_bpe300/config.yaml \
        --data mini/data/train --dtype float32,bfloat16 --threads 2
"""
import argparse
import statistics
import time

import soundfile as sf
import torch
import yaml
from torch.nn.utils.rnn import pad_sequence
from torch.profiler import ProfilerActivity, profile

from slm_lm.common.errors import InputError, fail
from slm_lm.rescoring.transcripts import read_text
from slm_lm.model.precision import DTYPES, autocast


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="config.yaml of an ESPnet ASR training experiment")
    p.add_argument("--data", required=True, help="data dir with wav.scp and text")
    p.add_argument("--batch-utts", type=int, default=8, help="utterances per batch (the mini config's ~8)")
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--dtype", default="float32,bfloat16", help="comma-separated, from " + ",".join(DTYPES))
    p.add_argument("--reps", type=int, default=3, help="timed passes per dtype, interleaved")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=12, help="operators to print")
    return p.parse_args(argv)


def read_utterances(data, n):
    """[(uttid, wav path, transcript)] of the first `n` utterances of `data`'s wav.scp."""
    texts, wavs = read_text(f"{data}/text"), read_text(f"{data}/wav.scp")
    missing = [key for key in wavs if key not in texts]
    if missing:
        raise InputError(f"{data}/text: no transcript for {missing[0]} (of wav.scp)")
    return [(key, path, texts[key]) for key, path in list(wavs.items())[:n]]


def load_batches(utterances, preprocess, batch_utts):
    """[(speech, speech_lengths, text, text_lengths)] of `utterances` in batches of `batch_utts`, the text
    tokenised by ESPnet's own preprocessor (`preprocess`, as in training)."""
    out = []
    for start in range(0, len(utterances), batch_utts):
        rows = [preprocess(key, {"speech": sf.read(path, dtype="float32")[0], "text": text})
                for key, path, text in utterances[start:start + batch_utts]]
        speech = [torch.from_numpy(row["speech"]) for row in rows]
        text = [torch.from_numpy(row["text"]) for row in rows]
        out.append((pad_sequence(speech, batch_first=True), torch.tensor([len(x) for x in speech]),
                    pad_sequence(text, batch_first=True, padding_value=-1), torch.tensor([len(y) for y in text])))
    return out


def main(argv=None):
    args = parse_args(argv)
    dtypes = args.dtype.split(",")
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        raise InputError(f"--dtype: {unknown} not among {sorted(DTYPES)}")
    torch.set_num_threads(args.threads)
    with open(args.config, encoding="utf-8") as f:
        config = argparse.Namespace(**yaml.safe_load(f))
    utterances = read_utterances(args.data, args.batch_utts * args.batches)  # bad input fails before ESPnet loads
    from espnet2.tasks.asr import ASRTask

    data = load_batches(utterances, ASRTask.build_preprocess_fn(config, train=False), args.batch_utts)
    torch.manual_seed(0)
    model = ASRTask.build_model(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def one_pass(dtype):
        for speech, speech_lengths, text, text_lengths in data:
            with autocast("cpu", dtype):
                loss, _, _ = model(speech, speech_lengths, text, text_lengths)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    one_pass(dtypes[0])
    seconds = {d: [] for d in dtypes}
    for _ in range(args.reps):
        for dtype in dtypes:
            start = time.perf_counter()
            one_pass(dtype)
            seconds[dtype].append(time.perf_counter() - start)
    base = statistics.median(seconds[dtypes[0]])
    print(f"{len(data)} batches of <= {args.batch_utts} utterances from {args.data}, {args.threads} threads; "
          f"median of {args.reps} interleaved passes:")
    for dtype in dtypes:
        median = statistics.median(seconds[dtype])
        print(f"  {dtype}: {median:.2f} s per pass ({base / median:.2f}x {dtypes[0]})")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        one_pass("float32")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=40))


if __name__ == "__main__":
    try:
        main()
    except (InputError, OSError) as e:
        fail("profile_asr_step.py", e)
