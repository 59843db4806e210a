"""The trainer's view: recompute logprobs with transformers on the served weights.

``python recompute.py MODEL_DIR`` reads ``[{"token_ids": [...], "positions": [...],
"temperature": t}, ...]`` (the temperature optional, 1 by default) as JSON on stdin and
writes, per sequence, the logprob of ``token_ids[p]`` given ``token_ids[:p]`` for each ``p``
of ``positions``, from the logits divided by the temperature (fp32, as a trainer would). Run with the
vLLM tier's venv (torch, transformers); :func:`tests.vllm.trainer.recompute` calls it.
"""

from __future__ import annotations

import json
import sys


def main(model_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    out = []
    with torch.no_grad():
        for seq in json.load(sys.stdin):
            ids = torch.tensor([seq["token_ids"]])
            logits = model(ids).logits[0].float() / float(seq.get("temperature", 1.0))
            logprobs = torch.log_softmax(logits, dim=-1)
            # the logprob of token p comes from the logits at p - 1
            out.append([logprobs[p - 1, seq["token_ids"][p]].item() for p in seq["positions"]])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
