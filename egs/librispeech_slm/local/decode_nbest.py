#!/usr/bin/env python3
"""Decode a data directory with ESPnet's Speech2Text and write its N-best lists.

    decode_nbest.py --asr-config exp/asr/config.yaml --asr-model exp/asr/valid.acc.ave.pth \
        --decode-config conf/decode_asr.yaml --data data/dev_clean --out exp/decode/dev_clean --nj 2

writes ESPnet's layout ``<out>/<k>best_recog/{text,token,token_int,score}`` for k = 1..nbest plus
``<k>best_recog/scores``: per hypothesis the unweighted per-scorer log-probabilities as JSON
(``uttid {"decoder": -3.2, "ctc": -1.9, "length_bonus": 12.0}``; ``length_bonus`` is the number
of decoded tokens including the end of sentence, what ESPnet's length-bonus scorer sums), which
ESPnet itself does not write. ``<out>/score_wer/ref.trn`` holds the references (sclite trn).

With ``--lm-config exp/lm_clm/config.yaml --lm-file exp/lm_clm/valid.loss.ave.pth`` the LM is fused in
the beam (shallow fusion, weight ``lm_weight`` of the decode config; the slm_lm kinds are registered
first, and only the clm kind is accepted: the others are bidirectional). The ``scores`` then hold "lm" too.

The utterances are split over ``--nj`` worker processes (one thread each). Every finished
utterance is appended to ``<out>/logdir/output.<n>/partial.jsonl``, so a killed run resumes
where it stopped; the final files are written atomically once all utterances are done.
"""
import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml
from tqdm import tqdm

from slm_lm.errors import InputError
from slm_lm.fileio import write_atomic


def read_table(path):
    """Read a Kaldi `key value` file (value may be empty) into an ordered dict."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            key, _, value = line.rstrip("\n").partition(" ")
            if not key:
                raise InputError(f"{path}, line {lineno}: empty line")
            if key in rows:
                raise InputError(f"{path}, line {lineno}: duplicate key {key}")
            rows[key] = value.strip()
    return rows


def read_partial(path):
    """Results already written by an interrupted run ({uttid: record}); a torn last line is dropped
    with a message, as it is the utterance being decoded when the job was killed."""
    done = {}
    if not path.exists():
        return done
    lines = path.read_text(encoding="utf-8").splitlines()
    for lineno, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):
                print(f"{path}, line {lineno}: incomplete record of an interrupted run, "
                      "decoding that utterance again", file=sys.stderr)
                break
            raise InputError(f"{path}, line {lineno}: not a JSON record") from None
        done[rec["uttid"]] = rec
    return done


def decode_job(job):
    """Worker: decode the utterances of one split, appending each result to partial.jsonl."""
    import torch
    from espnet2.bin.asr_inference import Speech2Text
    from espnet2.fileio.sound_scp import SoundScpReader

    n, todo, args = job
    torch.set_num_threads(1)
    logdir = Path(args["out"]) / "logdir" / f"output.{n}"
    logdir.mkdir(parents=True, exist_ok=True)
    partial = logdir / "partial.jsonl"
    # rewrite without the torn last line of a killed run before appending
    tmp = partial.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in read_partial(partial).values()),
                   encoding="utf-8")
    os.replace(tmp, partial)
    with open(args["decode_config"], encoding="utf-8") as f:
        conf = yaml.safe_load(f) or {}
    if args["lm_config"]:  # shallow fusion with an slm_lm clm (its weight: lm_weight of the decode config)
        from slm_lm.espnet_lm.registry import register_kinds

        register_kinds()
        conf.update(lm_train_config=args["lm_config"], lm_file=args["lm_file"])
    s2t = Speech2Text(asr_train_config=args["asr_config"], asr_model_file=args["asr_model"],
                      device=args["device"], **conf)
    eos = s2t.asr_model.eos
    reader = SoundScpReader(str(Path(args["data"]) / "wav.scp"), dtype="float32")
    with open(partial, "a", encoding="utf-8") as out:
        for uttid in todo:
            rate, speech = reader[uttid]
            hyps = []
            for text, token, token_int, hyp in s2t(speech):
                if eos in token_int:  # a hypothesis cut at maxlen right after <eos> keeps one <eos>
                    token_int = [t for t in token_int if t != eos]
                    token = s2t.converter.ids2tokens(token_int)
                    text = s2t.tokenizer.tokens2text(token)
                scores = {k: float(v) for k, v in hyp.scores.items()}
                scores.setdefault("length_bonus", float(len(hyp.yseq) - 1))
                hyps.append({"text": text, "token": token, "token_int": [int(t) for t in token_int],
                             "score": float(hyp.score), "scores": scores})
            out.write(json.dumps({"uttid": uttid, "hyps": hyps}) + "\n")
            out.flush()
            args["progress"].put(1)
    return n, len(todo)


def read_all_partial(out):
    """Merge the results of every worker of earlier and current runs."""
    records = {}
    for partial in sorted((Path(out) / "logdir").glob("output.*/partial.jsonl")):
        records.update(read_partial(partial))
    return records


def write_layout(out, records, refs, nbest):
    """Write <k>best_recog/{text,token,token_int,score,scores} and score_wer/ref.trn atomically."""
    files = {}
    for uttid in sorted(records):
        hyps = records[uttid]["hyps"]
        if not hyps:
            raise InputError(f"{uttid}: the decoder returned no hypothesis")
        for k, h in enumerate(hyps[:nbest], 1):
            d = f"{k}best_recog"
            for name, value in (("text", h["text"]), ("token", " ".join(h["token"])),
                                ("token_int", " ".join(map(str, h["token_int"]))),
                                ("score", f"{h['score']:.6f}"), ("scores", json.dumps(h["scores"]))):
                files.setdefault((d, name), []).append(f"{uttid} {value}".rstrip() + "\n")
    files[("score_wer", "ref.trn")] = [f"{refs[u]}\t({u.split('-')[0]}-{u})\n" for u in sorted(records)]
    for (d, name), lines in files.items():
        write_atomic(out / d / name, "".join(lines))


def main(argv=None):
    """Command line: decode one data directory into an N-best directory."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--asr-config", required=True)
    p.add_argument("--asr-model", required=True)
    p.add_argument("--decode-config", required=True, help="YAML of Speech2Text options (beam_size, nbest...)")
    p.add_argument("--data", required=True, help="data directory with wav.scp and text")
    p.add_argument("--out", required=True)
    p.add_argument("--nj", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--lm-config", help="shallow-fusion LM: an ESPnet LM exp's config.yaml (slm_lm clm or ESPnet's)")
    p.add_argument("--lm-file", help="its weights (with --lm-config)")
    args = p.parse_args(argv)
    if bool(args.lm_config) != bool(args.lm_file):
        raise InputError("--lm-config and --lm-file go together")
    if args.lm_config:
        from slm_lm.bin.asr_inference import check_fusion_lm

        check_fusion_lm(args.lm_config, args.asr_config)
        with open(args.decode_config, encoding="utf-8") as f:
            if not (yaml.safe_load(f) or {}).get("lm_weight", 1.0):
                raise InputError(f"{args.decode_config}: lm_weight is 0, so --lm-config would not be used: "
                                 "give a decode config with lm_weight > 0")

    for path in (args.asr_config, args.asr_model, args.decode_config, *filter(None, [args.lm_config, args.lm_file])):
        if not Path(path).is_file():
            raise InputError(f"{path}: not found (run the ASR training stage first)")
    data = Path(args.data)
    for name in ("wav.scp", "text"):
        if not (data / name).is_file():
            raise InputError(f"{data / name}: not found (run the data preparation stage first)")
    wavs, refs = read_table(data / "wav.scp"), read_table(data / "text")
    if set(wavs) != set(refs):
        odd = sorted(set(wavs) ^ set(refs))[:3]
        raise InputError(f"{data}: wav.scp and text have different utterances, e.g. {odd}")
    with open(args.decode_config, encoding="utf-8") as f:
        nbest = int((yaml.safe_load(f) or {}).get("nbest", 1))
    out = Path(args.out)
    uttids = sorted(wavs)
    done = read_all_partial(out)
    todo = [u for u in uttids if u not in done]
    nj = max(1, min(args.nj, len(todo)))
    splits = [todo[i::nj] for i in range(nj)]

    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        progress = manager.Queue()
        shared = {"asr_config": args.asr_config, "asr_model": args.asr_model, "device": args.device,
                  "decode_config": args.decode_config, "data": str(data), "out": str(out),
                  "lm_config": args.lm_config, "lm_file": args.lm_file,
                  "progress": progress}
        with ProcessPoolExecutor(nj, mp_context=ctx) as ex, \
                tqdm(total=len(uttids), initial=len(uttids) - len(todo),
                     desc=f"decode {data.name}", file=sys.stderr) as bar:
            futures = [ex.submit(decode_job, (n, s, shared)) for n, s in enumerate(splits) if s]
            while not all(f.done() for f in futures):
                while not progress.empty():
                    bar.update(progress.get())
                time.sleep(0.5)
            for f in futures:
                f.result()
    records = read_all_partial(out)
    missing = [u for u in uttids if u not in records]
    if missing:
        raise InputError(f"{out}: {len(missing)} utterances were not decoded, e.g. {missing[:3]}")
    write_layout(out, {u: records[u] for u in uttids}, refs, nbest)
    print(f"{out}: {len(uttids)} utterances, up to {nbest} hypotheses each")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        sys.exit(f"decode_nbest.py: error: {e}")
