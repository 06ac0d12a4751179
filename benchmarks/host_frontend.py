"""Time vLLM's OpenAI API server's serial work per request on this CPU, per vLLM version (the source of host.py
`FRONTEND_PER_TOKEN_RATIO_V0_19`: how the fitted front end scales from vLLM 0.10.1 to 0.19).

What is timed is vLLM's own server, not a re-implementation: the script starts, in an interpreter that has vLLM,
the version's own FastAPI app (`vllm/entrypoints/openai/api_server.py` `build_app` + `init_app_state`, served by
`launcher.serve_http` on uvicorn, as `vllm serve` does) over a real `AsyncLLM` (vllm/v1/engine/async_llm.py) whose
engine-core client (`AsyncMPClient`, vllm/v1/engine/core_client.py) is connected, as with external engines
(`client_addresses`), to a stand-in engine core in another process: it answers vLLM's start-up handshake, decodes
each `EngineCoreRequest` with vLLM's `MsgpackDecoder` and answers with one sampled token that finishes the request
(`EngineCoreOutputs` encoded with vLLM's `MsgpackEncoder`), so every request completes. A client (a third process,
stdlib `http.client`) sends requests one at a time (by default) and the server process's CPU time (summed over all its
threads: the event loop, the tokenizer's worker thread, ZMQ's I/O threads; /proc/<pid>/task/*/schedstat) is read
around them. Per request, that
is vLLM's serial front end:

- HTTP: uvicorn receiving the POST, FastAPI routing, vLLM's middlewares and the pydantic `CompletionRequest` /
  `ChatCompletionRequest` validation of the body;
- `OpenAIServingCompletion.create_completion` (0.10.1: vllm/entrypoints/openai/serving_completion.py; 0.19:
  vllm/entrypoints/openai/completion/serving.py): the prompt rendered and tokenised (0.10.1
  `_preprocess_completion` on the `_tokenizer_executor` thread; 0.19 the renderer, vllm/renderers), sampling params;
  chat (`OpenAIServingChat.create_chat_completion`): the chat template rendered with jinja first;
- `AsyncLLM.add_request`: the input processor (0.10.1 `Processor.process_inputs`, vllm/v1/engine/processor.py;
  0.19 `InputProcessor.process_inputs`, vllm/v1/engine/input_processor.py), `OutputProcessor.add_request`, and the
  engine-core client's send (msgpack encode + ZMQ `send_multipart`);
- and, because the stand-in engine finishes each request at once, the way back of ONE token: output processing,
  one stream chunk, the usage chunk and `[DONE]` (host_streaming.py measures that part per chunk, ~40 µs; it is
  in both versions' figures alike).

Both versions run with the same tokenizer (host_streaming.py's byte-level BPE, 32k vocabulary, trained on synthetic
words and saved as a transformers fast tokenizer under $TMPDIR/graphsim_streaming_tokenizer), the same model config
(Qwen3-0.6B's geometry, written below; no weights are read) and, for chat, the same chat template
(benchmarks/data/chat_template_chatml.jinja, see there). Each version uses its own installed transformers /
tokenizers (what that vLLM release runs with), and the same FastAPI / uvicorn / pydantic if the venvs share them.
vLLM's platform is set to CPU (`vllm.platforms._current_platform = CpuPlatform()`) only so that the config builds
without a GPU; nothing of the request path depends on it.

    # one version: the server's CPU time a request at two prompt lengths, both endpoints
    python benchmarks/host_frontend.py --python /tmp/h5_venv/bin/python --tokens 128,1024 --pairs 3
    # two versions, paired (what host.py cites: benchmarks/data/host_frontend_runs.jsonl)
    python benchmarks/host_frontend.py --python /tmp/h5_venv/bin/python,/tmp/h9/venv/bin/python \
        --tokens 128,512,2048 --endpoints completion --requests 50 --pairs 12

The driver runs in any Python (stdlib only); `--python` names the interpreters with vLLM (one per version); all
servers run at once and each point is timed in `--pairs` rounds, one batch of `--requests` requests on each server
(the same request bodies, the order alternating), so two versions compare batch by batch on the same load. Printed
per point: each server's median CPU µs a request over its batches, each pair's ratio (second / first) and their
median, and the median wall time to the response's headers (`headers_us`: a streaming response starts once the
request is in the engine; on a loaded machine it includes waiting for a core); then per server the least-squares
line per request + per prompt token over the lengths. Requests go one at a time (`--concurrency 1`, the serial work
a request) unless `--concurrency` puts several in flight, as a burst does. The client sets TCP_QUICKACK: without it
every response waits ~40 ms for the client's delayed ACK (idle time that even `GET /v1/models` shows).
"""

# pyright: reportMissingImports=false
# (vLLM is not a graphsim dependency: the server half of this script runs in an interpreter that has it)
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import signal
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHAT_TEMPLATE = os.path.join(HERE, "data", "chat_template_chatml.jinja")

# Qwen3-0.6B's config.json (huggingface.co/Qwen/Qwen3-0.6B; the kvcached runs' model): vLLM reads the architecture
# and the context length of it; no weights are loaded.
MODEL_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
    "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 40960, "vocab_size": 151936, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "hidden_act": "silu", "attention_bias": False,
    "bos_token_id": 0, "eos_token_id": 0,
}

# --- the stand-in engine core (run with the server's interpreter) ------------------------------------------------
_ENGINE = r"""
import sys, time, zmq
from vllm.v1.engine import (EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, EngineCoreRequestType,
                            FinishReason)
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
ctx = zmq.Context()
inp = ctx.socket(zmq.DEALER)
inp.setsockopt(zmq.IDENTITY, (0).to_bytes(2, "little"))  # engine rank 0 (MPClient.core_engines)
inp.connect(sys.argv[1])
out = ctx.socket(zmq.PUSH)
out.connect(sys.argv[2])
inp.send(b"")  # the start-up message MPClient.__init__ waits for on its input socket
dec, enc = MsgpackDecoder(EngineCoreRequest), MsgpackEncoder()
while True:
    frames = inp.recv_multipart(copy=False)
    if frames[0].bytes != EngineCoreRequestType.ADD.value:
        continue
    req = dec.decode([f.buffer for f in frames[1:]])
    done = EngineCoreOutput(request_id=req.request_id, new_token_ids=[5], finish_reason=FinishReason.LENGTH)
    out.send_multipart(enc.encode(EngineCoreOutputs(engine_index=0, outputs=[done], timestamp=time.monotonic())))
"""


def _serve(model_dir: str, port: int, ipc: str) -> None:
    """Run vLLM's API server (this interpreter's vLLM) on `port` over an AsyncLLM wired to the stand-in engine."""
    import asyncio

    import vllm
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # type: ignore[attr-defined]  # build the config without a GPU
    try:  # vllm/entrypoints/ssl.py imports watchfiles for --enable-ssl-refresh only (off here, not on the path)
        import watchfiles  # noqa: F401
    except ImportError:
        import types

        sys.modules["watchfiles"] = types.SimpleNamespace(Change=None, awatch=None)  # type: ignore[assignment]
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launcher import serve_http
    from vllm.entrypoints.openai import api_server
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.executor.abstract import Executor

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # 0.19
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # 0.10
    new = tuple(int(x) for x in vllm.__version__.split(".")[:2]) >= (0, 14)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", model_dir, "--served-model-name", "m", "--max-model-len", "4096", "--enforce-eager",
         "--port", str(port),
         "--chat-template", CHAT_TEMPLATE])
    validate_parsed_serve_args(args)
    config = AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    addresses = {"input_address": f"ipc://{ipc}/in", "output_address": f"ipc://{ipc}/out"}
    engine = subprocess.Popen([sys.executable, "-c", _ENGINE, addresses["input_address"],
                               addresses["output_address"]])

    async def main() -> None:
        client = AsyncLLM(config, executor_class=Executor, log_stats=not args.disable_log_stats,
                          usage_context=UsageContext.OPENAI_API_SERVER, client_addresses=addresses)

        async def tasks():  # a utility call answered by the engine in vLLM; the stand-in answers only requests
            return ("generate",)
        client.get_supported_tasks = tasks  # type: ignore[method-assign]
        sock = socket.create_server(("127.0.0.1", port))
        if new:
            app = api_server.build_app(args, ("generate",), client.model_config)
            await api_server.init_app_state(client, app.state, args, ("generate",))
        else:
            app = api_server.build_app(args)
            await api_server.init_app_state(client, config, app.state, args)
        shutdown = await serve_http(app, sock=sock, host="127.0.0.1", port=port, log_level="warning",
                                    access_log=not args.disable_uvicorn_access_log)
        await shutdown
    try:
        asyncio.run(main())
    finally:
        engine.terminate()


# --- the driver (stdlib only) -----------------------------------------------------------------------------------
def _cpu_s(pid: int) -> float:
    """CPU seconds of every thread of `pid` (/proc/<pid>/task/*/schedstat, ns; the first field is the time on a CPU),
    finer than utime + stime's clock ticks (10 ms)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended between listdir and open
            continue
    return total * 1e-9


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prompt(tokens: int, rng: random.Random) -> str:
    """Synthetic words; the tokenizer (trained on such words) gives ~1.1 tokens a word; the server's prompt_tokens
    count is reported, not this estimate."""
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
                    for _ in range(int(tokens / 1.6)))


def _body(endpoint: str, prompt: str) -> bytes:
    """What `vllm bench serve` sends (vllm/benchmarks/lib/endpoint_request_func.py, 0.10.1 / 0.19): streaming,
    usage in the stream, greedy with max_tokens; chat puts the prompt in one user message."""
    common = {"model": "m", "max_tokens": 1, "temperature": 0.0, "stream": True,
              "stream_options": {"include_usage": True}, "ignore_eos": True}
    if endpoint == "chat":
        return json.dumps({**common, "messages": [{"role": "user", "content": prompt}]}).encode()
    return json.dumps({**common, "prompt": prompt, "repetition_penalty": 1.0, "logprobs": None}).encode()


def _request(conn: http.client.HTTPConnection, endpoint: str, body: bytes) -> tuple[int, float]:
    """Send one request and read the whole stream: (prompt tokens the server counted, seconds to the response's
    headers, which a streaming response sends once the request reached the engine)."""
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    quickack = getattr(socket, "TCP_QUICKACK", None)  # Linux: ACK at once (a delayed ACK stalls the reply ~40 ms)
    if quickack is not None and conn.sock is not None:
        conn.sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
    t0 = time.perf_counter()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    headers_s = time.perf_counter() - t0
    if quickack is not None and conn.sock is not None:
        conn.sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)  # the flag does not stick: set again
    data = r.read().decode()
    if r.status != 200 or "[DONE]" not in data:
        raise SystemExit(f"{path}: HTTP {r.status}: {data[:300]}")
    usage = [json.loads(line[6:]) for line in data.splitlines() if line.startswith("data: {")]
    return next((u["usage"]["prompt_tokens"] for u in usage if u.get("usage")), 0), headers_s


def _tokenizer_model_dir(python: str) -> str:
    """A model directory: the config above and host_streaming.py's tokenizer (built by `python` if missing)."""
    tok = os.path.join(tempfile.gettempdir(), "graphsim_streaming_tokenizer")
    if not os.path.exists(os.path.join(tok, "tokenizer.json")):
        subprocess.run([python, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import host_streaming as h; "
                        "h._tokenizer_dir()"], check=True)
    path = tempfile.mkdtemp(prefix="graphsim_frontend_model_")
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(MODEL_CONFIG, f)
    for name in os.listdir(tok):
        with open(os.path.join(tok, name), "rb") as src, open(os.path.join(path, name), "wb") as dst:
            dst.write(src.read())
    return path


class Server:
    """One version's API server (started here, in its own interpreter) and a keep-alive connection to it."""

    def __init__(self, python: str) -> None:
        self.python, self.failed = python, False
        self.model_dir = model_dir = _tokenizer_model_dir(python)
        self.version = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                                      text=True).stdout.strip()
        self.port, self.ipc = _free_port(), tempfile.mkdtemp(prefix="graphsim_frontend_ipc_")
        ipc = self.ipc
        self.log = os.path.join(ipc, "server.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--serve", model_dir, str(self.port),
                                          ipc], stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "VLLM_NO_USAGE_STATS": "1"})

    def wait_ready(self) -> None:
        for _ in range(2400):
            if self.proc.poll() is not None:
                self.failed = True
                raise SystemExit(f"the server exited ({self.proc.returncode}); see {self.log}")
            try:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                self.conn.request("GET", "/v1/models")
                self.conn.getresponse().read()
                return
            except OSError:
                time.sleep(0.25)
        self.failed = True
        raise SystemExit(f"the server did not start; see {self.log}")

    def connect(self) -> None:
        """A fresh keep-alive connection (the server drops idle ones after VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s)."""
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as aiohttp does

    def batch(self, endpoint: str, bodies: list[bytes], concurrency: int = 1) -> tuple[float, list[float], int]:
        """The server's CPU µs per request over `bodies` (one at a time, or `concurrency` in flight, each client
        thread on its own connection, as a burst arrives), the seconds to each response's headers, and the prompt
        tokens the server counted for the last one."""
        c0 = _cpu_s(self.proc.pid)
        if concurrency <= 1:
            got = [_request(self.conn, endpoint, b) for b in bodies]
        else:
            from concurrent.futures import ThreadPoolExecutor

            def worker(part: list[bytes]) -> list[tuple[int, float]]:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                conn.connect()
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    return [_request(conn, endpoint, b) for b in part]
                finally:
                    conn.close()
            with ThreadPoolExecutor(concurrency) as pool:
                got = [r for part in pool.map(worker, [bodies[i::concurrency] for i in range(concurrency)])
                       for r in part]
        return (_cpu_s(self.proc.pid) - c0) / len(bodies) * 1e6, [h for _, h in got], got[-1][0]

    def stop(self) -> None:
        import shutil

        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.model_dir, ignore_errors=True)
        if not self.failed:  # keep the server's log when it did not start
            shutil.rmtree(self.ipc, ignore_errors=True)


def _line(points: list[dict], endpoint: str) -> tuple[float, float]:
    """Least-squares cpu_us = a + b × prompt_tokens over one endpoint's points."""
    xs = [p["prompt_tokens"] for p in points if p["endpoint"] == endpoint]
    ys = [p["cpu_us"] for p in points if p["endpoint"] == endpoint]
    if len(xs) < 2:
        return ys[0], 0.0
    slope, intercept = statistics.linear_regression(xs, ys)
    return intercept, slope


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--python", required=True, help="interpreter(s) with vLLM, comma-separated (one per version)")
    p.add_argument("--tokens", default="128,1024", help="prompt lengths (tokens, approximate)")
    p.add_argument("--endpoints", default="completion,chat")
    p.add_argument("--requests", type=int, default=50, help="requests a batch")
    p.add_argument("--pairs", type=int, default=12,
                   help="batches a point and server; with two interpreters, each pair is one batch on each, the "
                        "same requests, in alternating order")
    p.add_argument("--concurrency", type=int, default=1,
                   help="requests in flight within a batch (1: one at a time, the serial work; more: a burst, "
                        "where vLLM may batch tokenisation and the loop interleaves requests)")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the servers (finally below) when terminated
    pythons = a.python.split(",")
    tokens = [int(x) for x in a.tokens.split(",")]
    endpoints = a.endpoints.split(",")
    servers = [Server(py) for py in pythons]  # all started at once, timed one batch each in alternation
    try:
        for srv in servers:
            srv.wait_ready()
        rng = random.Random(0)
        out: dict = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                     "vllm": [srv.version for srv in servers], "requests_per_batch": a.requests,
                     "concurrency": a.concurrency, "points": []}
        for e in endpoints:
            for n in tokens:
                for srv in servers:  # warm-up: first-request compilation, caches
                    srv.connect()
                    srv.batch(e, [_body(e, _prompt(n, rng)) for _ in range(10)])
                cpu: list[list[float]] = [[] for _ in servers]
                headers: list[list[float]] = [[] for _ in servers]
                tokens_seen = [0 for _ in servers]
                for k in range(a.pairs):
                    bodies = [_body(e, _prompt(n, rng)) for _ in range(a.requests)]  # the same for every server
                    order = list(range(len(servers))) if k % 2 == 0 else list(range(len(servers)))[::-1]
                    for i in order:
                        servers[i].connect()
                        us, h, tokens_seen[i] = servers[i].batch(e, bodies, a.concurrency)
                        cpu[i].append(us)
                        headers[i].extend(h)
                point = {"endpoint": e, "target_tokens": n, "concurrency": a.concurrency,
                         "load_1min": round(os.getloadavg()[0], 2),
                         "servers": [{"vllm": srv.version, "prompt_tokens": tokens_seen[i],
                                      "cpu_us": round(statistics.median(cpu[i]), 1),
                                      "cpu_us_batches": [round(x, 1) for x in cpu[i]],
                                      "headers_us": round(statistics.median(headers[i]) * 1e6, 1)}
                                     for i, srv in enumerate(servers)]}
                if len(servers) == 2:  # paired: each batch's ratio, second over first, and their median
                    ratios = [b / a_ for a_, b in zip(cpu[0], cpu[1], strict=True)]
                    point["ratio_pairs"] = [round(x, 4) for x in ratios]
                    point["ratio_median"] = round(statistics.median(ratios), 4)
                print(json.dumps(point), flush=True)
                out["points"].append(point)
        for i, srv in enumerate(servers):  # per request and per token, least squares over the prompt lengths
            pts = [{"endpoint": p["endpoint"], "prompt_tokens": p["servers"][i]["prompt_tokens"],
                    "cpu_us": p["servers"][i]["cpu_us"]} for p in out["points"]]
            lines = {e: [round(v, 3) for v in _line(pts, e)] for e in endpoints}
            print(json.dumps({"vllm": srv.version, "lines": {
                e: {"per_request_us": v[0], "per_token_us": v[1]} for e, v in lines.items()}}))
    finally:
        for srv in servers:
            srv.stop()


if __name__ == "__main__":
    main()
