/*
 * api_server.h - the OpenAI-compatible HTTP API (`nanovllm serve`).
 *
 * One event-loop thread (libuv) owns every connection (http_server.h); the
 * engine thread owns sequences and the device (engine.h); they meet only
 * through a queue of output events and uv_async_send. Text work
 * (tokenization, the chat template) runs on libuv's worker pool so a long
 * prompt never stalls the loop. The model loads on the worker pool too, so
 * /health answers 503 from the first moment and 200 once ready.
 */
#ifndef NANOVLLM_API_SERVER_H
#define NANOVLLM_API_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/runner.h"
#include "engine/scheduler.h"
#include "chat/chat_template.h"
#include "chat/tool_calls/tool_call_format.h"
#include "server/openai/api_cors.h"
#include "server/openai/response_store.h"

/* --reasoning-parser: AUTO splits <think>...</think> off chat answers when
 * the tokenizer has both tags (Qwen3), QWEN3 insists, NONE never. */
typedef enum ReasoningParserChoice { REASONING_PARSER_AUTO, REASONING_PARSER_QWEN3, REASONING_PARSER_NONE } ReasoningParserChoice;

/* --runner (vLLM's flag): AUTO serves embeddings when the folder's
 * modules.json names a Pooling module, else generation; POOLING embeds
 * with any Qwen3 folder (its Pooling module, else last-token pooling,
 * normalised); GENERATE never embeds. */
typedef enum ApiRunnerKind { API_RUNNER_AUTO, API_RUNNER_GENERATE, API_RUNNER_POOLING } ApiRunnerKind;

typedef struct ApiServerOptions {
    const char *model_dir;
    const char *served_model_name; /* NULL: model_dir, as vLLM names it */
    const char *api_key;           /* NULL: no authentication */
    const char *host;
    int port; /* 0: any free port (logged) */
    int max_queued_requests; /* requests admitted but not yet producing; beyond: 503 */
    size_t max_body_bytes;   /* beyond: 413 */
    double shutdown_grace_seconds; /* SIGTERM: how long in-flight requests may finish */
    double header_timeout, body_timeout; /* seconds for a request's header block, then its body */
    int max_connections;                 /* beyond: a fast 503 */
    double keep_alive_timeout;           /* idle seconds between requests; 0: one per connection */
    int keep_alive_requests;             /* requests per connection */
    const char *chat_template;           /* NULL: the model folder's */
    ChatContentFormat chat_content_format;
    bool trust_request_chat_template; /* else a request's own "chat_template" is refused */
    /* --default-chat-template-kwargs: template variables under each
     * request's chat_template_kwargs (chat_template_kwargs_merge); NULL:
     * none. Checked by chat_template_kwargs_check; the caller owns it. */
    const json_t *default_chat_template_kwargs;
    ReasoningParserChoice reasoning_parser;
    /* --tool-call-parser: how answers' tool calls are read (and forced).
     * auto: as the chat template writes them; otherwise tool_call_parser,
     * NULL turning tool-call parsing off. */
    bool tool_call_parser_auto;
    const ToolCallFormat *tool_call_parser;
    SchedulingPolicy scheduling_policy; /* --scheduling-policy */
    ResponseStoreLimits responses_store; /* --responses-store-* */
    CorsOrigins allowed_origins; /* --allowed-origins; none: no CORS headers */
    bool no_webui;               /* --no-webui: no chat page at / */
    RunnerOptions runner;
    ApiRunnerKind runner_kind; /* --runner */
    ModelLoader loader; /* checkpoint + backend: the program's choice (cli/backend_setup.h) */
} ApiServerOptions;

/* Serves until SIGINT or SIGTERM; returns 0 after a clean shutdown, -1 if
 * the server could not start or the model could not load. */
int api_server_run(const ApiServerOptions *opts, Error *err);

#endif
