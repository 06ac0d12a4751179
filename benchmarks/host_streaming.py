"""Time vLLM's API-server work per streamed output token on this CPU (the source of host.py `API_SERVER_*`).

vLLM's OpenAI server (one process per API server; vllm/entrypoints/openai/api_server.py, FastAPI on uvicorn) does,
for every token it streams, three things on its single asyncio event loop:

1. `OutputProcessor.process_outputs` (vllm/v1/engine/output_processor.py): per request in the engine's step output,
   stats, incremental detokenisation, a `RequestOutput` put into the request's `RequestOutputCollector`
   (`AsyncLLM.output_handler`, vllm/v1/engine/async_llm.py);
2. the request's generator wakes (`AsyncLLM.generate`: `q.get_nowait() or await q.get()`), builds the stream chunk
   and serialises it (`OpenAIServingCompletion.completion_stream_generator`: `CompletionStreamResponse(...)`,
   `chunk.model_dump_json(exclude_unset=False)`, `f"data: {...}\\n\\n"`; the chat endpoint builds a
   `ChatCompletionStreamResponse` with a `DeltaMessage`);
3. Starlette's `StreamingResponse` sends the chunk through uvicorn's HTTP/1.1 protocol to the socket.

Parts 1 and 2 run vLLM's own classes; part 3 runs FastAPI + uvicorn (vLLM's server stack) with a generator that
waits on an asyncio queue per stream, fed once per "step" by one task (as `output_handler` feeds the collectors),
and reads the server process's CPU time per chunk streamed to an aiohttp client (the client is another process).
Needs vLLM, fastapi, uvicorn and aiohttp in the interpreter (not graphsim dependencies; e.g. the venv of
benchmarks/host_scheduler.py plus `pip install uvicorn fastapi aiohttp`). No model or tokenizer is downloaded: a
byte-level BPE tokenizer is trained on synthetic text (32k vocabulary) for the detokeniser.

    python benchmarks/host_streaming.py [--batch 64] [--steps 200] [--streams 64] [--chunks 200]

Runs on vLLM 0.10.x and 0.19.x (parts 1 and 2 switch on the version; part 3 is FastAPI/uvicorn only, so it
differs between venvs only if their fastapi/uvicorn/uvloop/httptools versions do).

Prints one JSON object: µs per token for each part (median of repeats) and their sum, with the CPU. Every part is
CPU time (`time.thread_time` in-process, the server process's utime + stime for part 3), not wall time, so a
loaded machine does not inflate it (it still runs slower on a slower or shared core).
"""

# pyright: reportMissingImports=false
# (vLLM is not a graphsim dependency: this script runs in an interpreter that has it)
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time

VOCAB = 32_000


def _tokenizer_dir() -> str:
    """A byte-level BPE tokenizer trained here on synthetic words, saved as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(tempfile.gettempdir(), "graphsim_streaming_tokenizer")
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return path
    rng = random.Random(0)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(60_000)]
    text = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(20_000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<eos>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>").save_pretrained(path)
    return path


def time_output_processor(batch: int, steps: int) -> float:
    """µs per token of `OutputProcessor.process_outputs` over `batch` requests, one new token each a step."""
    import vllm
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest
    from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector

    # Version switches: 0.10 wraps the tokenizer in a TokenizerGroup and its EngineCoreRequest carries the
    # multimodal fields and eos_token_id; 0.19 (AsyncLLM.__init__) passes the renderer's tokenizer (vLLM's
    # get_tokenizer) and `stream_interval` (1 by default), its request carries `mm_features`, its collector the id.
    new = tuple(int(x) for x in vllm.__version__.split(".")[:2]) >= (0, 14)
    if new:
        from vllm.tokenizers import get_tokenizer

        proc = OutputProcessor(get_tokenizer(_tokenizer_dir()), log_stats=True, stream_interval=1)
    else:
        from vllm.transformers_utils.tokenizer_group import TokenizerGroup

        group = TokenizerGroup(_tokenizer_dir(), enable_lora=False, max_num_seqs=batch, max_input_length=None)
        proc = OutputProcessor(group, log_stats=True)  # the API server logs stats by default (--disable-log-stats)
    rng = random.Random(1)
    queues = []
    for i in range(batch):
        params = SamplingParams(max_tokens=steps + 10, temperature=0.0, ignore_eos=True,
                                output_kind=RequestOutputKind.DELTA)  # streaming requests ask for deltas
        prompt = [rng.randrange(1, VOCAB) for _ in range(128)]
        if new:
            params.update_from_tokenizer(proc.tokenizer)  # as InputProcessor does (eos, stop ids)
            req = EngineCoreRequest(request_id=f"r{i}", prompt_token_ids=prompt, mm_features=None,
                                    sampling_params=params, pooling_params=None, arrival_time=time.time(),
                                    lora_request=None, cache_salt=None, data_parallel_rank=None,
                                    external_req_id=f"r{i}")
            q = RequestOutputCollector(output_kind=RequestOutputKind.DELTA, request_id=f"r{i}")
        else:
            req = EngineCoreRequest(request_id=f"r{i}", prompt_token_ids=prompt, mm_kwargs=None, mm_hashes=None,
                                    mm_placeholders=None, sampling_params=params, pooling_params=None,
                                    eos_token_id=0, arrival_time=time.time(), lora_request=None, cache_salt=None,
                                    data_parallel_rank=None)
            q = RequestOutputCollector(output_kind=RequestOutputKind.DELTA)
        proc.add_request(req, prompt=None, queue=q)
        queues.append(q)
    from vllm.v1.metrics.stats import IterationStats

    per_step = []
    for _ in range(steps):
        outs = [EngineCoreOutput(request_id=f"r{i}", new_token_ids=[rng.randrange(1, VOCAB)]) for i in range(batch)]
        t0 = time.thread_time()
        proc.process_outputs(outs, engine_core_timestamp=time.monotonic(), iteration_stats=IterationStats())
        per_step.append(time.thread_time() - t0)
        for q in queues:  # the generators drain their collectors (timed in part 2 / 3)
            q.get_nowait()
    return statistics.median(per_step) / batch * 1e6


def time_chunks(n: int, chat: bool) -> float:
    """µs per stream chunk built and serialised as vLLM's completion / chat stream generators do."""
    try:  # 0.10: one protocol module
        from vllm.entrypoints.openai.protocol import (
            ChatCompletionResponseStreamChoice, ChatCompletionStreamResponse, CompletionResponseStreamChoice,
            CompletionStreamResponse, DeltaMessage,
        )
    except ImportError:  # 0.19: split per endpoint
        from vllm.entrypoints.openai.chat_completion.protocol import (
            ChatCompletionResponseStreamChoice, ChatCompletionStreamResponse,
        )
        from vllm.entrypoints.openai.completion.protocol import CompletionResponseStreamChoice, CompletionStreamResponse
        from vllm.entrypoints.openai.engine.protocol import DeltaMessage

    created = int(time.time())
    t0 = time.thread_time()
    for _ in range(n):
        if chat:
            choice = ChatCompletionResponseStreamChoice(index=0, delta=DeltaMessage(content=" word"), logprobs=None,
                                                        finish_reason=None)
            chunk = ChatCompletionStreamResponse(id="chatcmpl-0", object="chat.completion.chunk", created=created,
                                                 choices=[choice], model="m")
            data = chunk.model_dump_json(exclude_unset=True)
        else:
            chunk = CompletionStreamResponse(id="cmpl-0", created=created, model="m", choices=[
                CompletionResponseStreamChoice(index=0, text=" word", logprobs=None, finish_reason=None,
                                               stop_reason=None)])
            data = chunk.model_dump_json(exclude_unset=False)
        _ = f"data: {data}\n\n"
    return (time.thread_time() - t0) / n * 1e6


_SERVER = r"""
import asyncio, sys, uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
app = FastAPI()
chunks, streams = int(sys.argv[2]), int(sys.argv[3])
queues = []
started = asyncio.Event()
line = 'data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

async def feeder():  # one put per stream a step, as AsyncLLM.output_handler fills the collectors
    await started.wait()
    for _ in range(chunks):
        for q in list(queues):
            q.put_nowait(line)
        await asyncio.sleep(0)

@app.on_event("startup")
async def _start():
    asyncio.get_running_loop().create_task(feeder())

@app.get("/stream")
async def stream():
    q = asyncio.Queue()
    queues.append(q)
    if len(queues) == streams:
        started.set()
    async def gen():
        for _ in range(chunks):
            yield await q.get()
        yield "data: [DONE]\n\n"
    return StreamingResponse(gen(), media_type="text/event-stream")

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", access_log=False)
"""


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_http(streams: int, chunks: int) -> float:
    """µs of API-server CPU per chunk streamed by FastAPI/uvicorn to `streams` concurrent clients."""
    import aiohttp

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(port), str(chunks), str(streams)])
    try:
        async def client() -> float:
            # no connection limit (aiohttp's default is 100): every stream must connect before the feeder starts
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                             timeout=aiohttp.ClientTimeout(total=None)) as s:
                for _ in range(600):
                    try:
                        async with s.get(f"http://127.0.0.1:{port}/docs"):
                            break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.1)
                else:
                    raise SystemExit("the FastAPI server did not start")
                before = _cpu_s(server.pid)

                async def one() -> int:
                    n = 0
                    async with s.get(f"http://127.0.0.1:{port}/stream") as r:
                        async for _ in r.content:
                            n += 1
                    return n
                got = await asyncio.gather(*(one() for _ in range(streams)))
                if sum(got) < streams * chunks:
                    raise SystemExit(f"{sum(got)} lines streamed, {streams * chunks} expected")
                return before
        before = asyncio.run(client())
        used = _cpu_s(server.pid) - before
        return used / (streams * chunks) * 1e6
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--chunks", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    import vllm

    detok = statistics.median(time_output_processor(a.batch, a.steps) for _ in range(a.repeats))
    completion = statistics.median(time_chunks(20_000, chat=False) for _ in range(a.repeats))
    chat = statistics.median(time_chunks(20_000, chat=True) for _ in range(a.repeats))
    http = statistics.median(time_http(a.streams, a.chunks) for _ in range(a.repeats))
    print(json.dumps({
        "vllm": vllm.__version__, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "load_1min": os.getloadavg()[0], "batch": a.batch, "streams": a.streams,
        "process_outputs_us_per_token": round(detok, 2), "completion_chunk_us": round(completion, 2),
        "chat_chunk_us": round(chat, 2), "http_stream_us_per_chunk": round(http, 2),
        "completion_total_us_per_token": round(detok + completion + http, 2),
        "chat_total_us_per_token": round(detok + chat + http, 2),
    }))


if __name__ == "__main__":
    main()
