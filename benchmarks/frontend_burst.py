"""When does a burst of requests reach vLLM's engine core? vLLM's own API server, timed on this CPU.

`vllm bench serve` at request rate inf sends every request at t = 0. graphsim's front end (serving/api_server.py,
frontend.py) takes them in as a FIFO beside the event loop: request i reaches the engine at about
i × (frontend_us + frontend_per_token_us × prompt tokens), so the engine starts on the first one. The alternative
is a barrier: the server's event loop runs every request's synchronous part (HTTP parse, pydantic validation, the
chat template) before any of them gets past its first await, and the engine gets nothing until the whole burst is
taken in. This script tells the two apart on vLLM's own code: the same server as benchmarks/host_frontend.py
(the version's FastAPI app over a real `AsyncLLM`, its engine-core client connected to a stand-in engine core), but
the stand-in logs when each `EngineCoreRequest` arrives (`time.monotonic()`, one clock for every process on Linux)
and answers like an engine that steps every `--step-ms`: each step finishes the requests that arrived before it
began, one token each. N client threads each send one streaming request at the same instant (a threading.Barrier),
as the benchmark's burst does.

Printed: the engine's arrival times after the burst was sent (first, 10 %, median, 90 %, last), the mean gap
between consecutive arrivals, and the server's CPU time a request. A FIFO shows the first arrival after about one
request's work and arrivals spread evenly to the last; a barrier shows the first arrival late, near the last.
The absolute times are this machine's (its CPU, its load: shared cores stretch them); the shape is vLLM's.

    python benchmarks/frontend_burst.py --python /tmp/h5_venv/bin/python --requests 200 --tokens 2000
"""

# pyright: reportMissingImports=false
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import host_frontend as hf  # noqa: E402  (the server, tokenizer and request bodies of host_frontend.py)

# The stand-in engine core: host_frontend.py's, plus an arrival log and engine-like steps.
_ENGINE = r"""
import sys, time, zmq
from vllm.v1.engine import (EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, EngineCoreRequestType,
                            FinishReason)
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
log = open(sys.argv[3], "a", buffering=1)
step_s = float(sys.argv[4])
ctx = zmq.Context()
inp = ctx.socket(zmq.DEALER)
inp.setsockopt(zmq.IDENTITY, (0).to_bytes(2, "little"))
inp.connect(sys.argv[1])
out = ctx.socket(zmq.PUSH)
out.connect(sys.argv[2])
inp.send(b"")
dec, enc = MsgpackDecoder(EngineCoreRequest), MsgpackEncoder()
pending, step_end = [], None
while True:
    timeout = 0 if step_end is None else max(0, int((step_end - time.monotonic()) * 1000))
    if inp.poll(timeout if pending else None):
        frames = inp.recv_multipart(copy=False)
        if frames[0].bytes != EngineCoreRequestType.ADD.value:
            continue
        req = dec.decode([f.buffer for f in frames[1:]])
        log.write(f"{time.monotonic():.6f} {len(req.prompt_token_ids or [])}\n")
        pending.append(req.request_id)
        if step_end is None:
            step_end = time.monotonic() + step_s
        continue
    if pending and time.monotonic() >= step_end:
        done = [EngineCoreOutput(request_id=r, new_token_ids=[5], finish_reason=FinishReason.LENGTH)
                for r in pending]
        out.send_multipart(enc.encode(EngineCoreOutputs(engine_index=0, outputs=done, timestamp=time.monotonic())))
        pending, step_end = [], None
"""


def engine_code(log_path: str, step_s: float) -> str:
    """The stand-in engine's source with its arrival log and step bound in (host_frontend._serve starts the engine
    with its two ZMQ addresses only)."""
    code = _ENGINE.replace("sys.argv[3]", repr(log_path)).replace("float(sys.argv[4])", repr(float(step_s)))
    if "sys.argv[3]" in code or "sys.argv[4]" in code:
        raise RuntimeError("the stand-in engine's source no longer has the placeholders engine_code fills")
    return code


def _serve(model_dir: str, port: int, ipc: str) -> None:
    """host_frontend's server with this script's stand-in engine (arrival log under `ipc`)."""
    hf._ENGINE = engine_code(os.path.join(ipc, "arrivals.log"), float(os.environ.get("GRAPHSIM_BURST_STEP_S", "0.35")))
    hf._serve(model_dir, port, ipc)


class BurstServer(hf.Server):
    """host_frontend.Server started through this file, so that its engine is the logging stand-in."""

    def __init__(self, python: str, step_ms: float) -> None:
        self.python, self.failed = python, False
        self.model_dir = model_dir = hf._tokenizer_model_dir(python)
        self.version = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                                      text=True).stdout.strip()
        self.port, self.ipc = hf._free_port(), tempfile.mkdtemp(prefix="graphsim_burst_ipc_")
        self.log = os.path.join(self.ipc, "server.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [python, os.path.abspath(__file__), "--serve", model_dir, str(self.port), self.ipc],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "VLLM_NO_USAGE_STATS": "1", "GRAPHSIM_BURST_STEP_S": str(step_ms / 1e3)})

    def arrivals(self) -> list[float]:
        with open(os.path.join(self.ipc, "arrivals.log")) as f:
            return [float(line.split()[0]) for line in f if line.strip()]


def _burst(port: int, endpoint: str, bodies: list[bytes]) -> tuple[float, list[float]]:
    """Send every body at once, one thread and connection each; (the burst's send time, each response's headers
    time), monotonic seconds."""
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    conns = []
    for _ in bodies:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.connect()
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(c)
    gate = threading.Barrier(len(bodies) + 1)
    headers = [0.0] * len(bodies)

    def one(i: int) -> None:
        gate.wait()
        conns[i].request("POST", path, body=bodies[i], headers={"Content-Type": "application/json"})
        r = conns[i].getresponse()
        headers[i] = time.monotonic()
        data = r.read().decode()
        if r.status != 200 or "[DONE]" not in data:
            raise SystemExit(f"{path}: HTTP {r.status}: {data[:300]}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    gate.wait()
    sent = time.monotonic()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    return sent, headers


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--python", required=True, help="interpreter with vLLM")
    p.add_argument("--requests", type=int, default=200, help="requests in the burst")
    p.add_argument("--tokens", type=int, default=2000, help="prompt length (tokens, approximate)")
    p.add_argument("--endpoint", default="chat", choices=("chat", "completion"))
    p.add_argument("--step-ms", type=float, default=350.0, help="the stand-in engine's step")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rng = random.Random(0)
    bodies = [hf._body(args.endpoint, hf._prompt(args.tokens, rng)) for _ in range(args.requests)]
    server = BurstServer(args.python, args.step_ms)
    try:
        server.wait_ready()
        hf._request(server.conn, args.endpoint, bodies[0])  # warm the path (the benchmark's test request)
        server.conn.close()
        warm = len(server.arrivals())
        c0 = hf._cpu_s(server.proc.pid)
        sent, headers = _burst(server.port, args.endpoint, bodies)
        cpu_us = (hf._cpu_s(server.proc.pid) - c0) / len(bodies) * 1e6
        got = [t - sent for t in server.arrivals()[warm:]]
    finally:
        server.stop()
    res = {"vllm": server.version, "endpoint": args.endpoint, "requests": args.requests, "tokens": args.tokens,
           "arrived": len(got), "first_s": got[0], "p10_s": _pct(got, 0.1), "median_s": _pct(got, 0.5),
           "p90_s": _pct(got, 0.9), "last_s": got[-1], "mean_gap_ms": (got[-1] - got[0]) / max(1, len(got) - 1) * 1e3,
           "headers_median_s": statistics.median(h - sent for h in headers), "server_cpu_us_per_request": cpu_us}
    if args.json:
        print(json.dumps(res))
        return
    print(f"vLLM {res['vllm']} {args.endpoint}, {args.requests} requests of ~{args.tokens} tokens sent at once: "
          f"at the engine after {res['first_s']:.3f} s (first), {res['p10_s']:.3f} (10 %), {res['median_s']:.3f} "
          f"(median), {res['p90_s']:.3f} (90 %), {res['last_s']:.3f} (last); mean gap {res['mean_gap_ms']:.2f} ms; "
          f"response headers median {res['headers_median_s']:.3f} s; server CPU {cpu_us:,.0f} µs a request")


if __name__ == "__main__":
    main()
