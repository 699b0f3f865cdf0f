#!/usr/bin/env python3
"""Speed-perturbed copy of a training data directory, as ESPnet's asr.sh ``--speed_perturb_factors``
(Kaldi's perturb_data_dir_speed.sh + dumping the audio): one copy of every utterance per factor.

    speed_perturb.py --factors "0.9 1.0 1.1" --audio-dir dump/sp --nj 8 data/train data/train_sp

Factor f resamples the audio as sox's ``speed f`` does (duration / f, pitch * f) and writes it as FLAC
to ``<audio-dir>/sp<f>/<uttid>.flac``; its utterance and speaker ids get the prefix ``sp<f>-``.
Factor 1.0 keeps the original audio and ids. ``wav.scp``, ``text``, ``utt2spk``, ``spk2utt`` of the
output directory are sorted; audio already written by an interrupted run is kept (resume).

``--shard J/N`` writes only the audio of every N-th utterance copy from the J-th on (job J of an array
of N, as run.sh submits them through its launcher); a run without it then writes the directory (the
audio being there, it only checks it).
"""
import argparse
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.rescoring.transcripts import read_table, write_table


def perturb_one(job):
    """Write the audio of one utterance at speed `factor` (skipped when already there)."""
    src, dest, factor = job
    dest = Path(dest)
    if dest.is_file():
        return
    import soundfile as sf
    import torch
    import torchaudio.functional as AF

    torch.set_num_threads(1)
    wave, rate = sf.read(src, dtype="float32")
    out = AF.resample(torch.from_numpy(wave), orig_freq=round(rate * factor), new_freq=rate).numpy()
    tmp = dest.with_name(f".{dest.name}.tmp")
    sf.write(tmp, out, rate, format="FLAC")
    tmp.replace(dest)


def parse_shard(text: str):
    """'J/N' -> (J, N) with 1 <= J <= N."""
    try:
        share, shares = (int(x) for x in text.split("/"))
    except ValueError:
        raise InputError(f"--shard {text!r}: expected J/N, e.g. 2/8") from None
    if not 1 <= share <= shares:
        raise InputError(f"--shard {text!r}: J must be between 1 and N")
    return share, shares


def main(argv=None):
    """Command line: make the speed-perturbed data directory."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--factors", required=True, help='space-separated factors, e.g. "0.9 1.0 1.1"')
    p.add_argument("--audio-dir", required=True, help="where the perturbed audio goes")
    p.add_argument("--nj", type=int, default=1, help="processes")
    p.add_argument("--shard", metavar="J/N", help="only the audio of share J of N (1 <= J <= N); no directory")
    p.add_argument("src", help="data directory (wav.scp, text, utt2spk)")
    p.add_argument("out", help="output data directory")
    args = p.parse_args(argv)
    try:
        factors = [float(f) for f in args.factors.split()]
    except ValueError:
        raise InputError(f"--factors {args.factors!r}: expected numbers, e.g. '0.9 1.0 1.1'") from None
    if not factors or any(not 0.5 <= f <= 2.0 for f in factors):
        raise InputError(f"--factors {args.factors!r}: factors between 0.5 and 2.0 expected")
    src = Path(args.src)
    wavs, text, utt2spk = (read_table(src / n) for n in ("wav.scp", "text", "utt2spk"))
    for name, table in (("text", text), ("utt2spk", utt2spk)):
        if set(table) != set(wavs):
            raise InputError(f"{src / name}: utterances differ from {src / 'wav.scp'}")
    rows, jobs = {}, []
    for f in factors:
        prefix = "" if f == 1.0 else f"sp{f:g}-"
        for u, path in wavs.items():
            if prefix:
                if path.endswith("|"):
                    raise InputError(f"{src / 'wav.scp'}: {u}: piped audio is not supported")
                dest = Path(args.audio_dir) / f"sp{f:g}" / f"{u}.flac"
                jobs.append((path, str(dest), f))
                path = str(dest.resolve())
            rows[prefix + u] = (path, text[u], prefix + utt2spk[u])
    for f in factors:
        if f != 1.0:
            (Path(args.audio_dir) / f"sp{f:g}").mkdir(parents=True, exist_ok=True)
    if args.shard:
        share, shares = parse_shard(args.shard)
        jobs = jobs[share - 1 :: shares]
    with ProcessPoolExecutor(max(1, args.nj)) as ex:
        list(ex.map(perturb_one, jobs, chunksize=64))
    if args.shard:
        print(f"{args.audio_dir}: share {args.shard}: {len(jobs)} utterance copies")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = sorted(rows)
    spk2utt = defaultdict(list)
    for k in keys:
        spk2utt[rows[k][2]].append(k)
    write_table(out / "wav.scp", ((k, rows[k][0]) for k in keys))
    write_table(out / "text", ((k, rows[k][1]) for k in keys))
    write_table(out / "utt2spk", ((k, rows[k][2]) for k in keys))
    write_table(out / "spk2utt", ((s, " ".join(u)) for s, u in sorted(spk2utt.items())))
    print(f"{out}: {len(keys)} utterances ({len(wavs)} x {len(factors)} speeds)")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("speed_perturb.py", e)
