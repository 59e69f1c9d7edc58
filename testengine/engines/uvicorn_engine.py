#!/usr/bin/python3
"""A vLLM-shaped test engine: a FastAPI app served by uvicorn as vLLM serves it.

Started by the Go package testengine (testengine.go); run with Debian's
/usr/bin/python3 (python3-fastapi, python3-uvicorn). Usage:

    uvicorn_engine.py --port N [--metrics-fault missing|hang|huge|nan]     (0 = any free port)
        [--load-slots N --load-token-ns NS --load-per-running-ns NS --load-per-kv-ns NS
         --load-prefill-ns NS [--load-keep-kv]]

Prints exactly one line "READY <port>" on stdout once it is listening.
Per-request behaviour comes from the X-Test-* request headers (the Header and Fault constants in ../testengine.go).
GET /metrics answers vLLM-shaped metrics, or fails as --metrics-fault says (the Metrics constants).
With --load-slots the engine times its work by the load model (class Load; testengine.Load in ../load.go).
"""

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import socket
import sys
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

HANG_MAX_S = 120.0
POLL_S = 0.05
GEN_PATHS = ("/v1/chat/completions", "/v1/completions")

# Generation requests received, and those whose response is still running.
# Only touched from the event loop thread.
STATS = {"requests": 0, "active": 0}
SEQ = {"n": 0}
# How GET /metrics fails ("" for not at all), and its counters.
METRICS = {"fault": "", "prompt_tokens": 0, "generation_tokens": 0}
METRICS_HANG_S = 30.0
METRICS_HUGE_BYTES = 50 << 20
GARBAGE = random.Random(1).randbytes(64 << 10)
# vLLM's KV cache here: 2048 blocks of 16 tokens; each running request
# holds 256 tokens.
NUM_GPU_BLOCKS, BLOCK_SIZE, TOKENS_PER_REQUEST = 2048, 16, 256


class Load:
    """The load model (testengine.Load), off unless --load-slots is given.

    At most `slots` requests run at once; the rest wait FIFO inside the
    engine, as vLLM's waiting queue and llama.cpp's deferred requests do.
    A request that gets a slot first prefills its prompt, one prefill at a
    time, during which no other request makes a token; then each output
    token takes token + per_running x running + per_kv x resident, resident
    being the KV tokens held in every slot: its own prompt and output, and
    with keep_kv the cells a finished request left in its slot until
    another request takes it (llama.cpp's unified cache). Only touched from
    the event loop thread."""

    def __init__(self, slots=0, token=0.0, per_running=0.0, per_kv=0.0, prefill=0.0, keep_kv=False):
        self.slots, self.token, self.per_running, self.per_kv = slots, token, per_running, per_kv
        self.prefill_s, self.keep_kv = prefill, keep_kv
        self.cells = [0] * slots
        self.busy = [False] * slots
        self.freed = [0] * slots  # when each slot was freed: the idle longest is taken first
        self.clock = 0
        self.waiters = collections.deque()
        self.prefilling = None  # an asyncio.Lock, made in the loop
        self.no_prefill = None  # set while no prefill runs

    def on(self):
        return self.slots > 0

    def running(self):
        return sum(self.busy)

    def waiting(self):
        return sum(1 for f in self.waiters if not f.done())

    def resident(self):
        return sum(self.cells)

    def _take(self):
        i = min((i for i in range(self.slots) if not self.busy[i]), key=lambda i: self.freed[i])
        self.busy[i], self.cells[i] = True, 0
        return i

    async def acquire(self):
        """Returns a slot, waiting in line for one."""
        if self.prefilling is None:
            self.prefilling, self.no_prefill = asyncio.Lock(), asyncio.Event()
            self.no_prefill.set()
        if not self.waiters and self.running() < self.slots:
            return self._take()
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:  # the client left while it waited
            if fut.done() and not fut.cancelled():
                self.release(fut.result())
            else:
                self.waiters.remove(fut)
            raise

    def release(self, i):
        self.clock += 1
        self.busy[i], self.freed[i] = False, self.clock
        if not self.keep_kv:
            self.cells[i] = 0
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(self._take())
                return

    async def prefill(self, i, tokens):
        async with self.prefilling:
            self.no_prefill.clear()
            try:
                await asyncio.sleep(tokens * self.prefill_s)
            finally:
                self.no_prefill.set()
        self.cells[i] += tokens + 1  # the prompt, and the first token

    async def decode(self, i, gap=None):
        """Waits out one output token of slot i: gap when a header set it."""
        if gap is None:
            gap = self.token + self.per_running * self.running() + self.per_kv * self.resident()
        await asyncio.sleep(gap)
        await self.no_prefill.wait()
        self.cells[i] += 1


LOAD = Load()

app = FastAPI()


class CountGeneration:
    """ASGI middleware counting generation requests until the app returns,
    i.e. until the response is complete or the client went away."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GEN_PATHS:
            await self.inner(scope, receive, send)
            return
        STATS["requests"] += 1
        STATS["active"] += 1
        # The W3C traceparent the request came with, echoed in the response
        # head (X-Test-Traceparent), as vLLM would continue it.
        parent = dict(scope["headers"]).get(b"traceparent")

        async def echo(message):
            if parent is not None and message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", [])) + [(b"x-test-traceparent", parent)])
            await send(message)

        try:
            await self.inner(scope, receive, echo)
        finally:
            STATS["active"] -= 1


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def sse(obj):
    return "data: " + dumps(obj) + "\n\n"


def error_body(status, message, etype="invalid_request_error"):
    # vLLM's ErrorResponse: an OpenAI error object, with vLLM's "object".
    return {"object": "error", "error": {"message": message, "type": etype, "param": None, "code": status}}


def header_int(request, name, default):
    try:
        return int(request.headers.get(name, ""))
    except ValueError:
        return default


def self_kill():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def hang(request, max_s=HANG_MAX_S):
    """Waits until the client is gone, at most max_s."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)


def count_words(value):
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        n = 0
        for v in value:
            if isinstance(v, int) and not isinstance(v, bool):
                n += 1  # a prompt of token ids
            elif isinstance(v, dict):
                n += count_words(v.get("text"))
            else:
                n += count_words(v)
        return n
    return 0


class HeadersOnly(Response):
    """Sends the response head (with a Content-Length) and then nothing:
    raw ASGI, so the body never follows. Then hangs, or kills the process."""

    def __init__(self, request, length, kill):
        super().__init__()
        self.request, self.length, self.kill = request, length, kill

    async def __call__(self, scope, receive, send):
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(self.length).encode())],
        })
        if self.kill:
            await asyncio.sleep(0.02)  # let the loop write the head out
            self_kill()
        await hang(self.request)


async def generate(request: Request, chat: bool):
    fault = request.headers.get("x-test-fault", "")
    first_delay = max(header_int(request, "x-test-first-delay-ms", 0), 0) / 1000.0
    gap = max(header_int(request, "x-test-gap-ms", 0), 0) / 1000.0
    # With the load model, headers given still set their own delays.
    own_first = "x-test-first-delay-ms" in request.headers
    own_gap = "x-test-gap-ms" in request.headers

    raw = await request.body()
    if fault == "kill-before-headers":
        self_kill()
    if fault == "hang-before-headers":
        await hang(request)
        return Response(status_code=204)
    if fault == "status-500":
        return JSONResponse(error_body(500, "test engine: injected failure", "InternalServerError"), status_code=500)
    if fault == "status-400":
        return JSONResponse(error_body(400, "test engine: injected bad request"), status_code=400)
    if fault == "status-503":
        return JSONResponse(error_body(503, "test engine: injected overload", "ServiceUnavailableError"), status_code=503)
    if fault == "non-json-500":
        return PlainTextResponse("Internal Server Error", status_code=500)
    if fault == "non-json-200":
        return PlainTextResponse("hello", status_code=200)

    try:
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("request body must be a JSON object")
    except ValueError as e:
        return JSONResponse(error_body(400, "invalid JSON: %s" % e), status_code=400)

    model = body.get("model") or "test"
    if not isinstance(model, str):
        model = str(model)
    stream = body.get("stream") is True
    opts = body.get("stream_options")
    include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    n = 16
    if isinstance(max_tokens, (int, float)) and not isinstance(max_tokens, bool):
        n = max(int(max_tokens), 0)
    n = header_int(request, "x-test-tokens", n)
    n = max(n, 0)
    choices_n = body.get("n") if isinstance(body.get("n"), int) and not isinstance(body.get("n"), bool) else 1
    choices_n = min(max(choices_n, 1), 8)
    n_logprobs = max(header_int(request, "x-test-logprobs", 0), 0)
    n_tools = max(header_int(request, "x-test-tool-calls", 0), 0) if chat else 0
    if chat:
        msgs = body.get("messages")
        prompt_tokens = sum(count_words(m.get("content")) for m in msgs if isinstance(m, dict)) if isinstance(msgs, list) else 0
    else:
        prompt_tokens = count_words(body.get("prompt"))
    completion = n * choices_n
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion, "completion_tokens": completion}
    METRICS["prompt_tokens"] += prompt_tokens
    METRICS["generation_tokens"] += completion

    async def start():
        """Takes a slot (with the load model) and waits until the first
        token; returns the slot, or None without the load model."""
        slot = await LOAD.acquire() if LOAD.on() else None
        try:
            if slot is not None and not own_first:
                await LOAD.prefill(slot, prompt_tokens)
            else:
                await asyncio.sleep(first_delay)
        except BaseException:
            if slot is not None:
                LOAD.release(slot)
            raise
        return slot

    async def next_token(slot):
        if slot is None:
            await asyncio.sleep(gap)
        else:
            await LOAD.decode(slot, gap if own_gap else None)

    SEQ["n"] += 1
    created = int(time.time())
    rid = ("chatcmpl-%d" if chat else "cmpl-%d") % SEQ["n"]
    obj = "chat.completion.chunk" if chat else "text_completion"
    finish = "tool_calls" if n_tools else "length"

    # What is generated: n tokens per choice, as text, or spread over
    # n_tools tool calls whose arguments are JSON ({"text": "tok tok "}):
    # pieces[i] is what token i adds, and to which call.
    def pieces():
        out = []
        if not n_tools:
            return [(None, "tok ")] * n
        per = max(n // n_tools, 1)
        for k in range(n_tools):
            toks = ["tok "] * (per if k < n_tools - 1 else max(n - per * (n_tools - 1), 1))
            toks[0] = '{"text": "' + toks[0]
            toks[-1] = toks[-1] + '"}'
            out.extend((k, t) for t in toks)
        return out[:max(n, n_tools)]

    def tool_id(c, k):
        return "chatcmpl-tool-%d-%d-%d" % (SEQ_ID, c, k)

    SEQ_ID = SEQ["n"]

    # vLLM's logprobs of token i, as its chat and completion APIs give them.
    def chat_lp(i):
        def one(j):
            return {"token": "tok ", "logprob": -0.25 * (j + 1) - 0.01 * (i % 7), "bytes": [116, 111, 107, 32]}
        e = one(0)
        e["top_logprobs"] = [one(j) for j in range(n_logprobs)]
        return e

    def text_lp(i, offset):
        return {"text_offset": [offset], "token_logprobs": [-0.25 - 0.01 * (i % 7)], "tokens": ["tok "],
                "top_logprobs": [{"tok %d" % j: -0.25 * (j + 1) - 0.01 * (i % 7) for j in range(n_logprobs)} if n_logprobs else None]}

    def whole_logprobs(c):
        if not n_logprobs:
            return None
        if chat:
            return {"content": [chat_lp(i) for i in range(n)]}
        merged = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        for i in range(n):
            for k, v in text_lp(i, 4 * i).items():
                merged[k].extend(v)
        return merged

    def message(c):
        # vLLM's ChatMessage as model_dump gives it: every field, nulls
        # included; content null once a tool parser found calls.
        calls = {}
        for k, t in pieces():
            if k is not None:
                calls.setdefault(k, []).append(t)
        tool_calls = [{"id": tool_id(c, k), "type": "function", "function": {"name": "tool_%d" % k, "arguments": "".join(calls[k])}}
                      for k in sorted(calls)]
        content = None if n_tools else "tok " * n
        return {"role": "assistant", "content": content, "refusal": None, "annotations": None, "audio": None,
                "function_call": None, "tool_calls": tool_calls, "reasoning_content": None}

    def chunk(c, content=None, role=None, finish=None, logprobs=None, tool=None, stop_reason=False, text=None):
        if chat:
            delta = {}
            if role is not None:
                delta["role"] = role
            if content is not None:
                delta["content"] = content
            if tool is not None:
                delta["tool_calls"] = [tool]
            choice = {"index": c, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            if stop_reason:
                choice["stop_reason"] = None
        else:
            choice = {"index": c, "text": text or "", "logprobs": logprobs, "finish_reason": finish, "stop_reason": None}
        return sse({"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]})

    if not stream:
        if chat:
            choices = [{"index": c, "message": message(c), "logprobs": whole_logprobs(c), "finish_reason": finish, "stop_reason": None}
                       for c in range(choices_n)]
            result = {"id": rid, "object": "chat.completion", "created": created, "model": model, "choices": choices,
                      "service_tier": None, "system_fingerprint": None,
                      "usage": dict(usage, prompt_tokens_details=None), "prompt_logprobs": None, "kv_transfer_params": None}
        else:
            choices = [{"index": c, "text": "tok " * n, "logprobs": whole_logprobs(c), "finish_reason": finish, "stop_reason": None,
                        "prompt_logprobs": None} for c in range(choices_n)]
            result = {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": choices,
                      "service_tier": None, "system_fingerprint": None,
                      "usage": dict(usage, prompt_tokens_details=None), "kv_transfer_params": None}
        if fault in ("hang-after-headers", "kill-after-headers"):
            return HeadersOnly(request, len(dumps(result).encode()), fault == "kill-after-headers")
        if not LOAD.on():
            await asyncio.sleep(first_delay + max(n - 1, 0) * gap)
            return JSONResponse(result)
        slot = await start()
        try:
            for _ in range(n - 1):
                await next_token(slot)
        finally:
            LOAD.release(slot)
        return JSONResponse(result)

    async def events():
        # StreamingResponse has sent the head before it first asks for an
        # event. Like vLLM, the role chunk goes out with the first output.
        if fault in ("kill-after-headers", "hang-after-headers"):
            if chat:
                yield chunk(0, content="", role="assistant")
            else:
                await asyncio.sleep(0.02)  # the head is out already
            if fault == "kill-after-headers":
                self_kill()
            await hang(request)
            return
        slot = await start()
        try:
            async for e in output(slot):
                yield e
        finally:
            if slot is not None:
                LOAD.release(slot)

    async def output(slot):
        if chat:
            for c in range(choices_n):
                yield chunk(c, content="", role="assistant")
        if fault == "broken-sse":
            yield chunk(0, content="tok ", text="tok ")
            yield "data: {not json\n\n"
            return
        if fault == "huge-line":
            yield chunk(0, content="tok ", text="tok ")
            yield b"data: " + b"x" * (4 << 20) + b"\n\n"
            yield "data: [DONE]\n\n"
            return
        ps = pieces()
        limit = 3 if fault in ("kill-mid-stream", "hang-mid-stream", "truncated") else None
        started = set()
        for i in range(len(ps) if limit is None else min(limit, len(ps))):
            # Yield to the loop between tokens even with no gap, as a real
            # engine does between decode steps: a client's disconnect is
            # seen, and other requests (/test/stats) are served.
            if i > 0:
                await next_token(slot)
            else:
                await asyncio.sleep(0)
            k, t = ps[i]
            for c in range(choices_n):  # the choices' chunks interleave
                lp = None
                if n_logprobs:
                    lp = {"content": [chat_lp(i)]} if chat else text_lp(i, 4 * i)
                if k is None:
                    yield chunk(c, content=t, text=t, logprobs=lp)
                elif (c, k) not in started:
                    started.add((c, k))
                    yield chunk(c, logprobs=lp, tool={"id": tool_id(c, k), "type": "function", "index": k,
                                                      "function": {"name": "tool_%d" % k, "arguments": t}})
                else:
                    yield chunk(c, logprobs=lp, tool={"index": k, "function": {"arguments": t}})
        if fault == "kill-mid-stream":
            self_kill()
        if fault == "hang-mid-stream":
            await hang(request)
            return
        if fault == "truncated":
            return
        for c in range(choices_n):
            yield chunk(c, content="" if chat else None, finish=finish, stop_reason=True)
        if include_usage:
            yield sse({"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@app.post("/v1/chat/completions")
async def chat_completions(request: Request):
    return await generate(request, True)


@app.post("/v1/completions")
async def completions(request: Request):
    return await generate(request, False)


@app.get("/health")
async def health():
    return Response(status_code=200)


@app.get("/v1/models")
async def models():
    return JSONResponse({"object": "list", "data": [{"id": "test", "object": "model", "root": "test"}]})


def exposition(nan):
    """vLLM 0.10's names and labels (v1 engine, one engine), a few of each kind."""
    labels = 'engine="0",model_name="test"'
    running, waiting = STATS["active"], 0
    usage = min(1.0, running * TOKENS_PER_REQUEST / (NUM_GPU_BLOCKS * BLOCK_SIZE))
    if LOAD.on():
        running, waiting = LOAD.running(), LOAD.waiting()
        usage = min(1.0, LOAD.resident() / (NUM_GPU_BLOCKS * BLOCK_SIZE))

    def v(x):
        return "NaN" if nan else repr(float(x))

    out = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 1234.0',
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        "vllm:num_requests_running{%s} %s" % (labels, v(running)),
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        "vllm:num_requests_waiting{%s} %s" % (labels, v(waiting)),
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        "# TYPE vllm:gpu_cache_usage_perc gauge",
        "vllm:gpu_cache_usage_perc{%s} %s" % (labels, v(usage)),
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        "vllm:kv_cache_usage_perc{%s} %s" % (labels, v(usage)),
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions_total counter",
        "vllm:num_preemptions_total{%s} %s" % (labels, v(0)),
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        "vllm:prompt_tokens_total{%s} %s" % (labels, v(METRICS["prompt_tokens"])),
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        "vllm:generation_tokens_total{%s} %s" % (labels, v(METRICS["generation_tokens"])),
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for le in ("0.001", "0.01", "0.1", "1.0", "10.0", "+Inf"):
        out.append('vllm:time_to_first_token_seconds_bucket{engine="0",le="%s",model_name="test"} %s' % (le, v(STATS["requests"])))
    out += [
        "vllm:time_to_first_token_seconds_count{%s} %s" % (labels, v(STATS["requests"])),
        "vllm:time_to_first_token_seconds_sum{%s} %s" % (labels, v(0.001 * STATS["requests"])),
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{block_size="%d",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",'
        'enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",'
        'num_cpu_blocks="None",num_gpu_blocks="%d",num_gpu_blocks_override="None",prefix_caching_hash_algo="builtin",'
        'sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} %s' % (BLOCK_SIZE, NUM_GPU_BLOCKS, v(1)),
    ]
    return "\n".join(out) + "\n"


async def garbage(total):
    sent = 0
    while sent < total:
        yield GARBAGE
        sent += len(GARBAGE)
        await asyncio.sleep(0)


@app.get("/metrics")
async def metrics(request: Request):
    fault = METRICS["fault"]
    if fault == "missing":
        return JSONResponse({"detail": "Not Found"}, status_code=404)
    if fault == "hang":
        await hang(request, METRICS_HANG_S)
        return Response(status_code=204)
    if fault == "huge":
        return StreamingResponse(garbage(METRICS_HUGE_BYTES), media_type="text/plain; version=0.0.4; charset=utf-8")
    return PlainTextResponse(exposition(fault == "nan"), media_type="text/plain; version=0.0.4; charset=utf-8")


@app.get("/test/stats")
async def stats():
    return JSONResponse(dict(STATS))


class Server(uvicorn.Server):
    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        if not self.should_exit:
            port = sockets[0].getsockname()[1]
            sys.stdout.write("READY %d\n" % port)
            sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--metrics-fault", default="", choices=["", "missing", "hang", "huge", "nan"])
    p.add_argument("--load-slots", type=int, default=0)
    for name in ("token", "per-running", "per-kv", "prefill"):
        p.add_argument("--load-%s-ns" % name, type=int, default=0)
    p.add_argument("--load-keep-kv", action="store_true")
    args = p.parse_args()
    METRICS["fault"] = args.metrics_fault
    global LOAD
    LOAD = Load(max(args.load_slots, 0), args.load_token_ns / 1e9, args.load_per_running_ns / 1e9,
                args.load_per_kv_ns / 1e9, args.load_prefill_ns / 1e9, args.load_keep_kv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", args.port))
    except OSError as e:
        print("bind 127.0.0.1:%d: %s" % (args.port, e), file=sys.stderr)
        sys.exit(3)
    config = uvicorn.Config(CountGeneration(app), host="127.0.0.1", port=args.port, timeout_keep_alive=5, log_level="warning")
    Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
