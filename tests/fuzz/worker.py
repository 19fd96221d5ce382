"""The fuzzer's worker process: ``python -m tests.fuzz.worker ember`` (or ``ort``) reads requests
from stdin and answers on stdout, one model at a time, until stdin closes.

Each message is an 8-byte little-endian length and a pickle (between the fuzzer's own
processes only). A request is ``{"model": bytes, "feeds": {name: array}, "input_shapes": {...}}``;
the answer is a dict whose ``status`` is ``ok`` (with ``outputs``), ``compiled`` (nothing to run
it with), ``ember_error`` / ``foreign`` (with ``type``, ``msg``, ``stage`` and, for a foreign
exception, ``tb``) for ember, or ``load_error`` / ``run_error`` (with ``msg``) for ONNX Runtime.
A crash or a hang shows as the process dying or not answering: the parent sees it.

The protocol uses a copy of the original stdout; file descriptor 1 is pointed at stderr, so
nothing a library prints can corrupt it.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import traceback
from typing import Any


def read_msg(f: Any) -> Any:
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(f.read(n))


def write_msg(f: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def run_ember(req: dict[str, Any]) -> dict[str, Any]:
    import ember

    stage = "compile"
    try:
        model = ember.compile(req["model"], input_shapes=req.get("input_shapes") or None, use_cache=False)
        if not req["feeds"]:
            return {"status": "compiled"}
        stage = "run"
        outs = model(**req["feeds"])
        return {"status": "ok", "outputs": [_plain(o) for o in outs]}
    except ember.EmberError as exc:
        return {"status": "ember_error", "type": type(exc).__name__, "msg": str(exc)[:2000], "stage": stage}
    except BaseException as exc:  # noqa: BLE001 - what the fuzzer looks for
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"status": "foreign", "type": type(exc).__name__, "msg": str(exc)[:2000], "stage": stage,
                "tb": traceback.format_exc()[-4000:]}


def _plain(o: Any) -> Any:
    import numpy as np

    if isinstance(o, list):
        return [_plain(x) for x in o]
    return None if o is None else np.asarray(o)


def run_ort(req: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    # The reference is the model as written: graph optimizations off (a fused Reshape built from
    # ONNX's inferred shapes can fail where the operators themselves would not).
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(req["model"], so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001
        return {"status": "load_error", "msg": str(exc)[:2000]}
    if not req["feeds"]:
        return {"status": "compiled"}
    try:
        names = {i.name for i in sess.get_inputs()}
        outs = sess.run(None, {k: v for k, v in req["feeds"].items() if k in names})
    except Exception as exc:  # noqa: BLE001
        return {"status": "run_error", "msg": str(exc)[:2000]}
    return {"status": "ok", "outputs": [_plain(o) for o in outs]}


def main() -> None:
    role = sys.argv[1]
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    handler = run_ember if role == "ember" else run_ort
    if role == "ember":
        import ember  # noqa: F401 - imported once, before the first model
    else:
        import onnxruntime  # noqa: F401
    write_msg(out, {"status": "ready"})
    while True:
        req = read_msg(inp)
        if req is None:
            return
        write_msg(out, handler(req))


if __name__ == "__main__":
    main()
