package wire

// chunkShapes are streamed chunks as the engines send them, one per shape a
// relay sees: they seed the differential fuzz test and drive the benchmarks.
// The vLLM and SGLang shapes follow sim/flavor.go and recent engine output;
// llama.cpp puts "choices" first and "timings" (floats) in its last chunk.
var chunkShapes = []struct{ name, data string }{
	{"vllm/chat-role", `{"id":"chatcmpl-8f2c1d","object":"chat.completion.chunk","created":1764490000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`},
	{"vllm/chat-token", `{"id":"chatcmpl-8f2c1d","object":"chat.completion.chunk","created":1764490000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null,"stop_reason":null}]}`},
	{"vllm/chat-last", `{"id":"chatcmpl-8f2c1d","object":"chat.completion.chunk","created":1764490000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`},
	{"vllm/text-token", `{"id":"cmpl-5e9a0b","object":"text_completion","created":1764490000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"text":" quick","logprobs":null,"finish_reason":null,"stop_reason":null}]}`},
	{"vllm/usage-only", `{"id":"chatcmpl-8f2c1d","object":"chat.completion.chunk","created":1764490000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":512,"total_tokens":768,"completion_tokens":256}}`},
	{"vllm/error", `{"object":"error","message":"The model does not exist.","type":"NotFoundError","param":null,"code":404}`},
	{"sglang/chat-token", `{"id":"5d7e0a9c3b1f4e2a","object":"chat.completion.chunk","created":1764490000,"model":"default","choices":[{"index":0,"delta":{"role":null,"content":" brown","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`},
	{"sglang/chat-finish", `{"id":"5d7e0a9c3b1f4e2a","object":"chat.completion.chunk","created":1764490000,"model":"default","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":128009}],"usage":null}`},
	{"sglang/reasoning", `{"id":"5d7e0a9c3b1f4e2a","object":"chat.completion.chunk","created":1764490000,"model":"default","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":" Let me think","tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`},
	{"sglang/tool-call", `{"id":"5d7e0a9c3b1f4e2a","object":"chat.completion.chunk","created":1764490000,"model":"default","choices":[{"index":0,"delta":{"role":null,"content":null,"tool_calls":[{"id":"call_1","index":0,"type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`},
	{"llamacpp/chat-token", `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" fox"}}],"created":1764490000,"id":"chatcmpl-Xk3pQ9","model":"gpt-3.5-turbo","system_fingerprint":"b4242-1a2b3c4d","object":"chat.completion.chunk"}`},
	{"llamacpp/chat-last", `{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1764490000,"id":"chatcmpl-Xk3pQ9","model":"gpt-3.5-turbo","system_fingerprint":"b4242-1a2b3c4d","object":"chat.completion.chunk","usage":{"completion_tokens":256,"prompt_tokens":512,"total_tokens":768},"timings":{"prompt_n":512,"prompt_ms":81.452,"prompt_per_token_ms":0.159,"prompt_per_second":6285.9,"predicted_n":256,"predicted_ms":2561.7,"predicted_per_token_ms":10.006,"predicted_per_second":99.93}}`},
	{"llamacpp/text-token", `{"choices":[{"text":" jumps","index":0,"logprobs":null,"finish_reason":null}],"created":1764490000,"id":"cmpl-Xk3pQ9","model":"gpt-3.5-turbo","system_fingerprint":"b4242-1a2b3c4d","object":"text_completion"}`},
	{"llamacpp/escaped", `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"\"\\n\u00e9\ud83d\ude00\t"}}],"created":1764490000,"id":"chatcmpl-Xk3pQ9","model":"gpt-3.5-turbo","object":"chat.completion.chunk"}`},
	{"openai/error", `{"error":{"message":"upstream engine failed","type":"server_error","param":null,"code":null}}`},
}
