#!/usr/bin/env python3
"""Decode a data directory (or one key-file shard of it) with ESPnet's Speech2Text; merge the shards.

    decode_nbest.py --asr-config exp/asr/config.yaml --asr-model exp/asr/valid.acc.ave.pth \
        --decode-config conf/decode_asr_beam10.yaml --data data/dev_clean --keys logdir/keys.3.scp \
        --out exp/decode/dev_clean/logdir/output.3
    decode_nbest.py --merge 4 --data data/dev_clean --out exp/decode/dev_clean

Decoding writes ESPnet's layout ``<out>/<k>best_recog/{text,token,token_int,score}`` for k = 1..nbest
plus ``<k>best_recog/scores``: per hypothesis the unweighted per-scorer log-probabilities as JSON
(``uttid {"decoder": -3.2, "ctc": -1.9, "length_bonus": 12.0}``; ``length_bonus`` is the number of
decoded tokens including the end of sentence, what ESPnet's length-bonus scorer sums), which ESPnet
itself does not write. The recipe runs one such job per shard (``JOB=1:nj``, one GPU each where there
are GPUs) with ``--out <set>/logdir/output.JOB``, as ESPnet's asr.sh does; ``--merge N`` then joins
the files of ``output.1`` .. ``output.N`` into ``<set>/<k>best_recog/`` sorted by utterance, checking
that every utterance of the data directory was decoded exactly once.

With ``--lm-config exp/lm_clm/config.yaml --lm-file exp/lm_clm/valid.loss.ave.pth`` the LM is fused in
the beam (shallow fusion, weight ``lm_weight`` of the decode config; the slm_lm kinds are registered
first, and only the clm kind is accepted: the others are bidirectional). The ``scores`` then hold "lm" too.

One thread per job. Every finished utterance is appended to ``<out>/partial.jsonl``, so a killed job
resumes where it stopped; the final files are written atomically once all its utterances are done.
"""
import argparse
import json
import sys
from pathlib import Path

import yaml

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.common.progress import progress_bar
from slm_lm.rescoring.transcripts import read_table

LAYOUT = ("text", "token", "token_int", "score", "scores")


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


def decode(args, uttids, out):
    """Decode `uttids` (skipping those in out/partial.jsonl) and return {uttid: record} of all."""
    import torch
    from espnet2.bin.asr_inference import Speech2Text
    from espnet2.fileio.sound_scp import SoundScpReader

    torch.set_num_threads(1)
    partial = out / "partial.jsonl"
    done = read_partial(partial)
    # rewrite without the torn last line of a killed run before appending
    write_atomic(partial, "".join(json.dumps(r) + "\n" for r in done.values()))
    todo = [u for u in uttids if u not in done]
    if not todo:
        return done
    with open(args.decode_config, encoding="utf-8") as f:
        conf = yaml.safe_load(f) or {}
    if args.lm_config:  # shallow fusion with an slm_lm clm (its weight: lm_weight of the decode config)
        from slm_lm.espnet_lm.registry import register_kinds

        register_kinds()
        conf.update(lm_train_config=args.lm_config, lm_file=args.lm_file)
    s2t = Speech2Text(asr_train_config=args.asr_config, asr_model_file=args.asr_model,
                      device=args.device, **conf)
    eos = s2t.asr_model.eos
    reader = SoundScpReader(str(Path(args.data) / "wav.scp"), dtype="float32")
    with open(partial, "a", encoding="utf-8") as f, \
            progress_bar(todo, desc=f"decode {out}", file=sys.stderr, mininterval=30) as bar:
        for uttid in bar:
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
            rec = {"uttid": uttid, "hyps": hyps}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            done[uttid] = rec
    return done


def write_layout(out, records, nbest):
    """Write <k>best_recog/{text,token,token_int,score,scores} atomically."""
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
    for (d, name), lines in files.items():
        write_atomic(out / d / name, "".join(lines))


def merge(out, njobs, uttids):
    """Join <out>/logdir/output.{1..njobs}/<k>best_recog/* into <out>/<k>best_recog/*, sorted by key.

    Every shard's <k>best_recog must hold all of LAYOUT for the same utterances, and every utterance of
    the data directory must be decoded exactly once; only then are the outputs written, each atomically,
    ``1best_recog/text`` (what the later stages look for) last."""
    shards = [out / "logdir" / f"output.{n}" for n in range(1, njobs + 1)]
    missing_shards = [s for s in shards if not s.is_dir()]
    if missing_shards:
        raise InputError(f"{missing_shards[0]}: shard not found ({len(missing_shards)} of {njobs} missing; "
                         "run the decoding jobs first)")
    dirs = sorted({d.name for s in shards for d in s.glob("*best_recog")}, key=lambda n: int(n[:-10]))
    if "1best_recog" not in dirs:
        raise InputError(f"{out}/logdir: no output.<n>/1best_recog (run the decoding jobs first)")
    outputs = {}
    for d in dirs:
        tables = {name: {} for name in LAYOUT}
        for s in shards:
            if d != "1best_recog" and not (s / d).is_dir():
                continue  # no utterance of this shard has a k-th hypothesis
            shard_keys = None
            for name in LAYOUT:
                path = s / d / name
                if not path.is_file():
                    raise InputError(f"{path}: missing; shard {s} is incomplete (decode it again)")
                rows = read_table(path)
                if shard_keys is None:
                    shard_keys = set(rows)
                elif set(rows) != shard_keys:
                    odd = sorted(set(rows) ^ shard_keys)[:3]
                    raise InputError(f"{path}: other utterances than {s / d / LAYOUT[0]}, e.g. {odd}; shard {s} "
                                     "is incomplete (decode it again)")
                for key, value in rows.items():
                    if key in tables[name]:
                        raise InputError(f"{path}: {key} was decoded by two shards")
                    tables[name][key] = value
        if d == "1best_recog":
            missing = [u for u in uttids if u not in tables["text"]]
            if missing:
                raise InputError(f"{out}/logdir: {len(missing)} utterances were not decoded "
                                 f"(no {d}/text line), e.g. {missing[:3]}")
        for name, rows in tables.items():
            outputs[out / d / name] = "".join(f"{k} {rows[k]}".rstrip() + "\n" for k in sorted(rows))
    last = out / "1best_recog" / "text"
    for path in sorted(outputs, key=lambda path: path == last):
        write_atomic(path, outputs[path])
    return len(dirs)


def main(argv=None):
    """Command line: decode one shard of a data directory, or merge the shards' outputs."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--asr-config")
    p.add_argument("--asr-model")
    p.add_argument("--decode-config", help="YAML of Speech2Text options (beam_size, nbest...)")
    p.add_argument("--data", required=True, help="data directory with wav.scp and text")
    p.add_argument("--keys", help="the utterances to decode, one a line (first column; default: all)")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--merge", type=int, metavar="N", help="merge <out>/logdir/output.1..N instead")
    p.add_argument("--lm-config", help="shallow-fusion LM: an ESPnet LM exp's config.yaml (slm_lm clm or ESPnet's)")
    p.add_argument("--lm-file", help="its weights (with --lm-config)")
    args = p.parse_args(argv)

    data = Path(args.data)
    for name in ("wav.scp", "text"):
        if not (data / name).is_file():
            raise InputError(f"{data / name}: not found (run the data preparation stage first)")
    wavs, refs = read_table(data / "wav.scp"), read_table(data / "text")
    if set(wavs) != set(refs):
        odd = sorted(set(wavs) ^ set(refs))[:3]
        raise InputError(f"{data}: wav.scp and text have different utterances, e.g. {odd}")
    out = Path(args.out)
    if args.merge:
        n = merge(out, args.merge, sorted(wavs))
        print(f"{out}: {len(wavs)} utterances, up to {n} hypotheses each, from {args.merge} shards")
        return
    for opt in ("asr_config", "asr_model", "decode_config", *(("lm_config", "lm_file") if args.lm_config else ())):
        path = getattr(args, opt)
        if not path or not Path(path).is_file():
            raise InputError(f"--{opt.replace('_', '-')} {path}: not found (run the training stage first)")
    if bool(args.lm_config) != bool(args.lm_file):
        raise InputError("--lm-config and --lm-file go together")
    if args.lm_config:
        from slm_lm.bin.asr_inference import check_fusion_lm

        check_fusion_lm(args.lm_config, args.asr_config)
        with open(args.decode_config, encoding="utf-8") as f:
            if not (yaml.safe_load(f) or {}).get("lm_weight", 1.0):
                raise InputError(f"{args.decode_config}: lm_weight is 0, so --lm-config would not be used: "
                                 "give a decode config with lm_weight > 0")
    uttids = sorted(wavs)
    if args.keys:
        uttids = sorted(read_table(args.keys))
        unknown = [u for u in uttids if u not in wavs]
        if unknown:
            raise InputError(f"{args.keys}: {len(unknown)} keys are not in {data}/wav.scp, e.g. {unknown[:3]}")
    with open(args.decode_config, encoding="utf-8") as f:
        nbest = int((yaml.safe_load(f) or {}).get("nbest", 1))
    records = decode(args, uttids, out)
    write_layout(out, {u: records[u] for u in uttids}, nbest)
    print(f"{out}: {len(uttids)} utterances, up to {nbest} hypotheses each")


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("decode_nbest.py", e)
