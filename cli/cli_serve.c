/*
 * cli_serve.c - `nanovllm serve`: the OpenAI-compatible HTTP server.
 *
 * NANOVLLM_PORT and NANOVLLM_API_KEY give the defaults of --port and
 * --api-key: the container image's HEALTHCHECK reads the same port variable,
 * and a key in the environment stays out of `ps`. A flag still wins.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "backend_setup.h"
#include "commands.h"
#include "chat/tool_calls/tool_call_format.h"
#include "server/openai/api_server.h"

static const char USAGE[] = "usage: nanovllm serve [--model] DIR [options]\n";

static const char HELP[] =
    "Serves the model over an OpenAI-compatible HTTP API.\n"
    "\n"
    "  --model DIR                   Hugging Face model folder or GGUF file (or first, without\n"
    "                                --model, as vLLM takes it: nanovllm serve DIR)\n"
    "  --host HOST                   address to bind (default " DEFAULT_HOST ")\n"
    "  --port N                      port (default $NANOVLLM_PORT or " DEFAULT_TEXT(DEFAULT_PORT)
    "; 0 picks a free one and logs it)\n"
    "  --served-model-name NAME      the model's name in the API (default: DIR)\n"
    "  --api-key KEY                 require Authorization: Bearer KEY on /v1/* (default $NANOVLLM_API_KEY)\n"
    "  --max-queued-requests N       requests waiting for their first token before 503 (default "
    DEFAULT_TEXT(DEFAULT_MAX_QUEUED_REQUESTS) ")\n"
    "  --max-body-bytes BYTES        largest request body (default "
    DEFAULT_TEXT(DEFAULT_MAX_BODY_MIB) "MiB)\n"
    "  --shutdown-grace SECONDS      SIGTERM: time in-flight requests get to finish (default "
    DEFAULT_TEXT(DEFAULT_SHUTDOWN_GRACE_SECONDS) ")\n"
    "  --header-timeout SECONDS      a request's whole header block, from connecting (default "
    DEFAULT_TEXT(DEFAULT_HEADER_TIMEOUT_SECONDS) "): else 408\n"
    "  --body-timeout SECONDS        its whole body, after the headers (default "
    DEFAULT_TEXT(DEFAULT_BODY_TIMEOUT_SECONDS) "): else closed\n"
    "  --max-connections N           open connections; beyond, a fast 503 (default "
    DEFAULT_TEXT(DEFAULT_MAX_CONNECTIONS) ")\n"
    "  --keep-alive-timeout SECONDS  an idle connection waits this long for its next request (default "
    DEFAULT_TEXT(DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS) "; 0: one request per connection)\n"
    "  --keep-alive-requests N       requests one connection serves before it closes (default "
    DEFAULT_TEXT(DEFAULT_KEEP_ALIVE_REQUESTS) ")\n"
    CHAT_TEMPLATE_USAGE
    "  --trust-request-chat-template a request may bring its own \"chat_template\" (else 400)\n"
    "  --default-chat-template-kwargs JSON\n"
    "                                a JSON object of chat template variables for every chat, e.g.\n"
    "                                '{\"enable_thinking\": false}'; a request's chat_template_kwargs\n"
    "                                win key by key\n"
    "  --reasoning-parser NAME       qwen3 or none: <think>...</think> of chat answers into\n"
    "                                reasoning_content (default: qwen3 when the tokenizer has the tags)\n"
    "  --tool-call-parser NAME       auto (the chat template's format), hermes, qwen3_xml (or\n"
    "                                qwen3_coder) or none (default auto)\n"
    "  --enable-auto-tool-choice     accepted for vLLM compatibility: tool calls are always parsed\n"
    "  --runner NAME                 auto (default: embeddings when modules.json names a Pooling\n"
    "                                module), pooling (/v1/embeddings only) or generate\n"
    "  --scheduling-policy NAME      fcfs (default) or priority: requests' \"priority\", lower first,\n"
    "                                preempting lower priority under KV pressure\n"
    "  --responses-store-entries N   /v1/responses kept for previous_response_id and GET (default "
    DEFAULT_TEXT(DEFAULT_RESPONSES_STORE_ENTRIES) "; 0: none)\n"
    "  --responses-store-bytes BYTES their size in all, oldest dropped first (default "
    DEFAULT_TEXT(DEFAULT_RESPONSES_STORE_MIB) "MiB)\n"
    "  --responses-store-ttl SECONDS how long one is kept (default "
    DEFAULT_TEXT(DEFAULT_RESPONSES_STORE_TTL_SECONDS) ")\n"
    "  --allowed-origins LIST        CORS: origins whose pages may call the API, comma-separated or\n"
    "                                a JSON list ('[\"https://app.example\"]', \"*\": any; default none)\n"
    "  --no-webui                    no chat page at /\n"
    "  --quiet                       no log on stderr\n" RUNNER_OPTIONS_USAGE;

/* --default-chat-template-kwargs: checked now, so a typo stops the server
 * at start-up instead of failing every chat request. */
static int parse_default_kwargs(const char *arg, json_t **out, Error *err) {
    json_error_t jerr;
    *out = json_loads(arg, JSON_REJECT_DUPLICATES, &jerr);
    if (!*out) return error_set(err, "--default-chat-template-kwargs: not JSON (%s)", jerr.text);
    if (chat_template_kwargs_check(*out, "--default-chat-template-kwargs", err)) {
        json_decref(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int command_serve(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'}, {"served-model-name", required_argument, 0, 'n'},
        {"api-key", required_argument, 0, 'k'}, {"max-queued-requests", required_argument, 0, 'Q'},
        {"max-body-bytes", required_argument, 0, 'B'}, {"shutdown-grace", required_argument, 0, 'g'},
        {"header-timeout", required_argument, 0, 'T'}, {"body-timeout", required_argument, 0, 'D'},
        {"max-connections", required_argument, 0, 'C'}, {"chat-template", required_argument, 0, 't'},
        {"keep-alive-timeout", required_argument, 0, 'W'}, {"keep-alive-requests", required_argument, 0, 'N'},
        {"chat-template-content-format", required_argument, 0, 'F'},
        {"trust-request-chat-template", no_argument, 0, 'U'},
        {"default-chat-template-kwargs", required_argument, 0, 'K'},
        {"reasoning-parser", required_argument, 0, 'R'}, {"tool-call-parser", required_argument, 0, 'P'},
        {"enable-auto-tool-choice", no_argument, 0, 'A'}, {"scheduling-policy", required_argument, 0, 'S'},
        {"responses-store-entries", required_argument, 0, 'E'}, {"responses-store-bytes", required_argument, 0, 'Y'},
        {"responses-store-ttl", required_argument, 0, 'L'},
        {"allowed-origins", required_argument, 0, 'O'}, {"no-webui", no_argument, 0, 'w'},
        {"runner", required_argument, 0, 0x101},
        COMMON_LONG_OPTIONS, {0, 0, 0, 0}};
    ApiServerOptions o = {.loader = backend_model_loader,
                          .host = DEFAULT_HOST,
                          .port = DEFAULT_PORT,
                          .max_queued_requests = DEFAULT_MAX_QUEUED_REQUESTS,
                          .max_body_bytes = (size_t)DEFAULT_MAX_BODY_MIB << 20,
                          .shutdown_grace_seconds = DEFAULT_SHUTDOWN_GRACE_SECONDS,
                          .header_timeout = DEFAULT_HEADER_TIMEOUT_SECONDS,
                          .body_timeout = DEFAULT_BODY_TIMEOUT_SECONDS,
                          .max_connections = DEFAULT_MAX_CONNECTIONS,
                          .keep_alive_timeout = DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS,
                          .keep_alive_requests = DEFAULT_KEEP_ALIVE_REQUESTS,
                          .tool_call_parser_auto = true,
                          .responses_store = {DEFAULT_RESPONSES_STORE_ENTRIES,
                                              (size_t)DEFAULT_RESPONSES_STORE_MIB << 20,
                                              DEFAULT_RESPONSES_STORE_TTL_SECONDS},
                          .runner = runner_default_options()};
    Error err = {0};
    int rc = 0;
    char *chat_template = NULL;
    json_t *default_kwargs = NULL;
    const char *env_port = getenv("NANOVLLM_PORT");
    if (env_port && env_port[0]) rc = parse_int_arg("NANOVLLM_PORT", env_port, 0, 65535, &o.port, &err);
    const char *env_key = getenv("NANOVLLM_API_KEY");
    if (env_key && env_key[0]) o.api_key = env_key;
    optind = 0;
    int c, index;
    while (rc == 0 && (c = getopt_long(argc, argv, "", options, &index)) != -1) {
        switch (c) {
        case 'm': o.model_dir = optarg; break;
        case 'H': o.host = optarg; break;
        case 'p': rc = parse_int_arg("--port", optarg, 0, 65535, &o.port, &err); break;
        case 'n': o.served_model_name = optarg; break;
        case 'k': o.api_key = optarg; break;
        case 'Q': rc = parse_int_arg("--max-queued-requests", optarg, 1, 1 << 24, &o.max_queued_requests, &err); break;
        case 'B': rc = parse_size_arg("--max-body-bytes", optarg, &o.max_body_bytes, &err); break;
        case 'g': rc = parse_double_arg("--shutdown-grace", optarg, 0, 3600, &o.shutdown_grace_seconds, &err); break;
        case 'T': rc = parse_double_arg("--header-timeout", optarg, 0.1, 3600, &o.header_timeout, &err); break;
        case 'D': rc = parse_double_arg("--body-timeout", optarg, 0.1, 3600, &o.body_timeout, &err); break;
        case 'C': rc = parse_int_arg("--max-connections", optarg, 1, 1 << 20, &o.max_connections, &err); break;
        case 'E': rc = parse_int_arg("--responses-store-entries", optarg, 0, 1 << 24, &o.responses_store.max_entries, &err); break;
        case 'Y': rc = parse_size_arg("--responses-store-bytes", optarg, &o.responses_store.max_bytes, &err); break;
        case 'L': rc = parse_double_arg("--responses-store-ttl", optarg, 1, 1e7, &o.responses_store.ttl_seconds, &err); break;
        case 'W': rc = parse_double_arg("--keep-alive-timeout", optarg, 0, 3600, &o.keep_alive_timeout, &err); break;
        case 'N': rc = parse_int_arg("--keep-alive-requests", optarg, 1, 1 << 30, &o.keep_alive_requests, &err); break;
        case 't':
            free(chat_template);
            chat_template = NULL;
            rc = read_chat_template_arg(optarg, &chat_template, &err);
            break;
        case 'F':
            if (chat_content_format_parse(optarg, &o.chat_content_format))
                rc = error_set(&err, "--chat-template-content-format: '%s' is not auto, string, "
                                     "openai or verbatim", optarg);
            break;
        case 'U': o.trust_request_chat_template = true; break;
        case 'K':
            json_decref(default_kwargs);
            rc = parse_default_kwargs(optarg, &default_kwargs, &err);
            break;
        case 'A': break;
        case 'O':
            cors_origins_free(&o.allowed_origins);
            rc = cors_origins_parse(optarg, &o.allowed_origins, &err);
            break;
        case 'w': o.no_webui = true; break;
        case 'R':
            if (strcmp(optarg, "qwen3") == 0 || strcmp(optarg, "deepseek_r1") == 0) o.reasoning_parser = REASONING_PARSER_QWEN3;
            else if (strcmp(optarg, "none") == 0) o.reasoning_parser = REASONING_PARSER_NONE;
            else rc = error_set(&err, "--reasoning-parser: '%s' is not qwen3 or none", optarg);
            break;
        case 'P':
            o.tool_call_parser_auto = strcmp(optarg, "auto") == 0;
            o.tool_call_parser = tool_call_format_named(optarg);
            if (!o.tool_call_parser_auto && !o.tool_call_parser && strcmp(optarg, "none") != 0)
                rc = error_set(&err, "--tool-call-parser: '%s' is not auto, hermes, qwen3_xml, qwen3_coder or none", optarg);
            break;
        case 0x101:
            if (strcmp(optarg, "auto") == 0) o.runner_kind = API_RUNNER_AUTO;
            else if (strcmp(optarg, "pooling") == 0) o.runner_kind = API_RUNNER_POOLING;
            else if (strcmp(optarg, "generate") == 0) o.runner_kind = API_RUNNER_GENERATE;
            else rc = error_set(&err, "--runner: '%s' is not auto, pooling or generate", optarg);
            break;
        case 'S':
            if (strcmp(optarg, "fcfs") == 0) o.scheduling_policy = SCHEDULING_FCFS;
            else if (strcmp(optarg, "priority") == 0) o.scheduling_policy = SCHEDULING_PRIORITY;
            else rc = error_set(&err, "--scheduling-policy: '%s' is not fcfs or priority", optarg);
            break;
        default: {
            int common = parse_common_option(c, c == 0 ? options[index].name : NULL, optarg,
                                             &o.runner, USAGE, HELP, &err);
            if (common == 0) rc = error_set(&err, "invalid option (see nanovllm serve --help)");
            else if (common == 2) {
                free(chat_template);
                json_decref(default_kwargs);
                cors_origins_free(&o.allowed_origins);
                return 0;
            }
            else if (common < 0) rc = -1;
        }
        }
    }
    if (rc == 0 && optind < argc) { /* vLLM's form: `serve MODEL [options]` */
        if (argc - optind > 1) rc = error_set(&err, "unexpected argument '%s'", argv[optind + 1]);
        else if (o.model_dir && strcmp(o.model_dir, argv[optind]) != 0)
            rc = error_set(&err, "two models: --model %s and %s (serve takes one)", o.model_dir,
                           argv[optind]);
        else o.model_dir = argv[optind];
    }
    if (rc == 0 && !o.model_dir) rc = error_set(&err, "no model: nanovllm serve DIR (or --model DIR)");
    if (rc == 0 && o.api_key && !o.api_key[0]) rc = error_set(&err, "--api-key must not be empty");
    if (rc == 0 && o.max_body_bytes < 1024) rc = error_set(&err, "--max-body-bytes: at least 1KiB");
    if (rc) {
        free(chat_template);
        json_decref(default_kwargs);
        cors_origins_free(&o.allowed_origins);
        fprintf(stderr, "nanovllm serve: %s\n%s", err.msg, USAGE);
        return 2;
    }
    o.chat_template = chat_template;
    o.default_chat_template_kwargs = default_kwargs;
    rc = api_server_run(&o, &err);
    free(chat_template);
    json_decref(default_kwargs);
    cors_origins_free(&o.allowed_origins);
    if (rc) {
        fprintf(stderr, "nanovllm serve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
