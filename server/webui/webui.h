/*
 * webui.h - the chat page (server/webui/index.html, app.js, style.css),
 * built into the binary and served at / and /webui/... unless `serve
 * --no-webui`. Public like /health: the page asks for the API key itself.
 */
#ifndef NANOVLLM_WEBUI_H
#define NANOVLLM_WEBUI_H

#include <stdbool.h>

#include "server/http/http_server.h"

/* True if the request was for one of the page's files (GET or HEAD) and
 * has been answered; false if it is not the page's to answer. */
bool webui_serve(HttpExchange *ex);

#endif
