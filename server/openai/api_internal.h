/*
 * api_internal.h - the structures the API server's files share, and each
 * file's part in a request's life.
 *
 * ApiServer is the process-wide state (event loop, engine, tokenizer, HTTP
 * server); ApiRequest one OpenAI request from arrival to its last byte.
 * Everything here belongs to the event-loop thread, except the event queue
 * fields marked as guarded by ApiServer.events_lock, which the engine
 * thread appends to.
 *
 * A generation request passes the files in this order (the declarations
 * at the end follow it):
 *   api_server.c    (loop)        route, authenticate, read the body
 *                                 (api_request.c: the request is created);
 *   api_parse.c     (loop)        fields parsed and checked, model matched;
 *   api_prepare.c   (worker pool) chat template and tokenizer: prompt ids;
 *   api_engine.c    (loop)        max_tokens settled, submitted to the engine;
 *                   (engine)      each output copied into an event, loop woken;
 *                   (loop)        events replayed onto their requests;
 *   api_send.c      (loop)        SSE chunks, or the whole body at the end;
 *   api_request.c   (loop)        the request freed once its client is done.
 * /tokenize and /detokenize (api_tokenize.c) stop after preparation.
 * /v1/embeddings (api_embeddings.c) has its own parse, preparation,
 * submission and answer, and shares the engine bridge (api_engine.c).
 */
#ifndef NANOVLLM_API_INTERNAL_H
#define NANOVLLM_API_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

#include "api_error.h"
#include "api_parse.h"
#include "api_responses.h"
#include "api_server.h"
#include "server/http/http_server.h"
#include "metrics.h"
#include "openai_json.h"
#include "response_store.h"
#include "chat/chat_output.h"
#include "base/byte_buf.h"
#include "engine/engine.h"
#include "structured/constraint.h"
#include "chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

typedef enum Route {
    ROUTE_NONE,
    ROUTE_HEALTH,
    ROUTE_MODELS,
    ROUTE_MODEL, /* GET /v1/models/{id} */
    ROUTE_METRICS,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_RESPONSES, /* POST /v1/responses */
    ROUTE_RESPONSE,  /* GET or DELETE /v1/responses/{id} */
    ROUTE_EMBEDDINGS, /* POST /v1/embeddings */
} Route;

/* One engine output, copied off the engine thread. */
typedef struct ApiEvent {
    struct ApiEvent *next;
    int choice; /* prompt index * n + sample index */
    bool has_token;
    int32_t token;
    bool has_logprobs;
    SampleLogprobs logprobs;
    FinishReason finish;
    int stop_string;
    int num_cached_tokens;
    double time;
    char *text; /* malloc'ed, NULL when empty */
    size_t text_len;
    char *error; /* FINISH_ERROR: malloc'ed message */
    ErrorKind error_kind;
} ApiEvent;

typedef struct Choice {
    ByteBuf text; /* non-streaming: the completion so far */
    json_t *logprobs;
    size_t text_offset;
    FinishReason finish;
    const char *stop_string;
    bool finished;
    bool opened; /* streaming chat: the role chunk went out */
    int num_tokens;
    double last_token_time;
    ApiEvent *final_event; /* preallocated, so a finish is never lost to malloc */
    /* Chat with reasoning or tools (api_chat_output.c): the parser of this
     * answer; non-streaming, what it released (text holds the content). */
    ChatOutputParser *parser;
    ByteBuf reasoning;
    json_t *tool_calls; /* [{id, type, function}] */
    int num_tool_calls; /* released so far (streaming: the next index) */
    float *embedding;   /* /v1/embeddings: [hidden_size], the engine's vector */
} Choice;

typedef struct ApiServer ApiServer;
typedef struct ApiRequest ApiRequest;

/* What the engine's callback needs to find its request and prompt. */
typedef struct PromptContext {
    ApiRequest *request;
    int prompt_index;
} PromptContext;

struct ApiRequest {
    ApiServer *srv;
    HttpExchange *ex; /* NULL once the client is gone */
    Route route;
    ApiKind kind;
    char id[48];
    char method[8], path[48]; /* for the log line, which may come after the exchange */
    bool logged;
    long created;
    double t_arrival, t_first;
    json_t *body;
    OpenAIParams params;
    ResponsesState *responses; /* /v1/responses: its own ends (api_responses.h); else NULL */
    struct {                   /* /v1/embeddings (api_embeddings.c) */
        int num_texts;         /* text inputs, tokenized on the pool (0: token ids, already read) */
        bool base64;           /* encoding_format */
        int dimensions;        /* 0: the model's */
        int truncate;          /* truncate_prompt_tokens: 0 not given, -1 the model's length */
    } embed;
    ApiRequest *prev, *next; /* ApiServer.requests */

    /* prepared on the worker pool */
    uv_work_t work;
    bool work_pending;
    ApiError error;
    bool failed;
    int num_prompts;
    int32_t **prompts;
    int *prompt_lens;
    char **prompt_texts; /* echo: the prompts as text */
    char *result;        /* /tokenize, /detokenize: the JSON answer */
    Constraint *constraint; /* structured outputs: a reference, or NULL */
    json_t *tool_spec;      /* tool_choice required / named: the constraint's spec */
    const ConstraintBuilder *constraint_builder; /* with CONSTRAINT_BUILT: who writes its grammar */
    int32_t constraint_after;

    /* submitted */
    PromptContext *contexts;
    uint64_t *engine_ids;
    int num_submitted;
    Choice *choices;
    int num_choices, num_finished;
    bool counted_queued; /* in ApiServer.num_queued until the first token */
    bool done;           /* the response is complete */
    int prompt_tokens, completion_tokens, cached_tokens;
    unsigned status;
    char *error_message; /* a choice's error, for the response */
    ErrorKind error_kind;

    /* guarded by ApiServer.events_lock */
    ApiEvent *ev_head, *ev_tail;
    bool dirty;
    ApiRequest *dirty_next;
};

struct ApiServer {
    ApiServerOptions opts;
    const char *model_name;
    uv_loop_t *loop;
    uv_async_t wake;
    uv_signal_t sigint, sigterm;
    uv_timer_t shutdown_timer;
    HttpServer *http;
    LoadedModel model;
    Engine *engine;
    Tokenizer *tok;
    ChatTemplate *chat; /* compiled once at load */
    TokenVocab *vocab;  /* the tokens' bytes, for structured outputs */
    ConstraintCache *constraints;
    ResponseStore *responses; /* finished responses, for retrieval and previous_response_id */
    bool reasoning;                /* chat answers split <think>...</think> off */
    ModelPooling pooling; /* mode POOLING_NONE: a generation model; else it serves embeddings only */
    /* How the template asks for tool calls (or --tool-call-parser); NULL:
     * not parsed, because the template takes no tools (or parsing is off),
     * or because it writes them in a format not known here
     * (tool_format_unknown). */
    const ToolCallFormat *tool_format;
    bool tool_format_unknown;
    int max_model_len;
    bool ready, shutting_down, stopped;
    bool cut_off; /* the grace period is over: requests were ended */
    double shutdown_started;
    long created; /* wall-clock start, for /v1/models */
    int exit_code;
    uv_work_t load_work;
    Error load_err;
    int load_rc;
    double started;

    pthread_mutex_t events_lock;
    ApiRequest *dirty_head;

    ApiRequest *requests; /* alive */
    int num_requests, num_queued;
    Metrics metrics;
    double last_drop_log[NUM_DROPS]; /* on_dropped's rate limit */
    long long unlogged_drops[NUM_DROPS];
};

/* api_request.c: a request's route and life */
Route api_route_find(const char *path);
const char *api_route_method(Route route); /* what Allow says: "GET", "POST" or "GET, DELETE" */
bool api_route_allows(Route route, const char *method);
ApiRequest *api_request_new(ApiServer *s, HttpExchange *ex, Route route);
/* prefix and 96 random bits in hex (request, call and item ids) */
void api_random_id(char *out, size_t size, const char *prefix);
void api_request_maybe_free(ApiRequest *r);

/* api_parse.c: completions and chat fields (loop) */
int api_parse_request(ApiRequest *r, ApiError *err);

/* api_tools.c: tools, tool_choice, parallel_tool_calls (loop, after api_parse_params) */
int api_parse_tools(ApiRequest *r, ApiError *err);
ChatOutputOptions api_chat_output_options(const ApiRequest *r, int prompt_index);

/* api_chat_output.c: each chat choice's text through its parser (loop) */
int api_chat_output_begin(ApiRequest *r); /* at submission: -1 out of memory */
/* Feeds an event's text (and the finish) to the choice's parser; what it
 * releases lands in *d, tool calls given their ids. */
int api_chat_output_take(ApiRequest *r, Choice *c, const ApiEvent *ev, ChatOutputDelta *d);
/* d's calls as OpenAI's tool_calls list (the message's, or a stream's
 * deltas: a header then the arguments); starting at index first. */
json_t *api_tool_calls_json(const ChatOutputDelta *d, int first, bool stream);
void api_chat_output_end(Choice *c);

/* api_prepare.c: prompts to ids (worker pool); failures in r->error */
void api_prepare(ApiRequest *r);
char *api_render_chat(ApiRequest *r, size_t *len); /* the chat template on r->body */

/* api_structured.c: the request's constraint compiled (worker pool, after the prompts) */
int api_prepare_constraint(ApiRequest *r);
/* Whether prompt i ends inside a <think> block the template opened. */
bool api_prompt_in_reasoning(const ApiRequest *r, int prompt_index);

/* api_tokenize.c: /tokenize and /detokenize */
void api_tokenize(ApiRequest *r);         /* worker pool: the answer into r->result */
void api_tokenize_respond(ApiRequest *r); /* loop */

/* api_embeddings.c: /v1/embeddings */
int api_embeddings_parse(ApiRequest *r, ApiError *err);        /* loop */
void api_embeddings_prepare(ApiRequest *r);                    /* worker pool */
void api_embeddings_submit(ApiRequest *r);                     /* loop */
void api_embeddings_event(ApiRequest *r, const ApiEvent *ev);  /* loop: answers after the last */

/* api_engine.c: to the engine and back */
void api_submit(ApiRequest *r);                              /* loop */
void api_abort(ApiRequest *r);                               /* loop: the client is gone */
void api_on_engine_output(const EngineOutput *o, void *user); /* engine thread */
void api_on_wake(uv_async_t *wake);                           /* loop: replays the events */

/* api_send.c: what the client receives (loop) */
void api_response_event(ApiRequest *r, const ApiEvent *ev);
void api_respond_json(ApiRequest *r, unsigned status, json_t *body);
void api_respond_error(ApiRequest *r, const ApiError *e);
void api_log_request(ApiRequest *r, const char *note);
void api_respond_shutdown(ApiRequest *r); /* out of grace: end it properly now */

#endif
