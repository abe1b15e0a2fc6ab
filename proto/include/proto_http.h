/*
 * proto_http: the HTTP/1.1 server of tallyd (docs/DESIGN.md §9) on a caller's
 * uv_loop_t. It parses with http_parser, keeps a few headers the app names,
 * enforces the limits below, routes by exact path and method, and hands each
 * request to one handler that fills a response, at once or later (deferred,
 * when the answer waits for something else on the loop); the server
 * serialises it with `Cache-Control: no-store`, `Content-Length` and
 * `Connection`, in order, over keep-alive and pipelined connections. Nothing
 * is allocated per request: each connection gets one block at accept, freed
 * when its handles are closed, and a deferred answer lives in that block.
 *
 * Header-wide rules: every function runs on the loop's thread only. Strings
 * passed in are borrowed for the call (the server copies what it keeps).
 * Limits of 0 in the config mean the documented default.
 */
#ifndef PROTO_HTTP_H
#define PROTO_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "tally_common.h"

typedef struct proto_http_server proto_http_server;
/* A deferred answer: one at a time per connection, held in the connection. */
typedef struct proto_http_deferred proto_http_deferred;

/* Defaults of struct proto_http_config (and what a 0 there means). */
#define PROTO_HTTP_DEFAULT_MAX_HEAD_BYTES     8192  /* request line + headers -> 431 */
#define PROTO_HTTP_DEFAULT_MAX_URL_BYTES      2048  /* request target -> 414 */
#define PROTO_HTTP_DEFAULT_MAX_HEADERS        64    /* header fields -> 431 */
#define PROTO_HTTP_DEFAULT_MAX_VALUE_BYTES    512   /* one kept header's value -> 431 */
#define PROTO_HTTP_DEFAULT_MAX_BODY_BYTES     4096  /* request body -> 413 */
#define PROTO_HTTP_DEFAULT_MAX_RESPONSE_BYTES 8192  /* answer body; more is a 500 */
#define PROTO_HTTP_DEFAULT_READ_BUFFER_BYTES  8192  /* per connection */
#define PROTO_HTTP_DEFAULT_IDLE_TIMEOUT_MS    10000 /* no byte read or written */
#define PROTO_HTTP_DEFAULT_REQUEST_TIMEOUT_MS 10000 /* first byte to last of a request */
#define PROTO_HTTP_DEFAULT_LINGER_TIMEOUT_MS  1000  /* drain after a final answer */
#define PROTO_HTTP_DEFAULT_MAX_CONNECTIONS    10000 /* beyond: 503, then close */
#define PROTO_HTTP_DEFAULT_BACKLOG            511

/* Upper bounds of the config (larger values are TALLY_EINVAL). */
#define PROTO_HTTP_LIMIT_BYTES_MAX      (1u << 20) /* any *_bytes field */
#define PROTO_HTTP_LIMIT_CONNECTIONS    1000000
#define PROTO_HTTP_KEPT_MAX             12  /* headers the app can ask to keep */
#define PROTO_HTTP_ROUTES_MAX           16  /* entries in a route table */
#define PROTO_HTTP_NAME_MAX             63  /* header name or route path, bytes */
#define PROTO_HTTP_RESP_HEADERS_MAX     8   /* headers a handler can add */
#define PROTO_HTTP_RESP_HEADER_LINE_MAX 256 /* "Name: value" of one, NUL included */

/* Methods, as bits so a route can allow several. HEAD is allowed wherever GET is. */
enum proto_http_method {
    PROTO_HTTP_GET = 1 << 0,
    PROTO_HTTP_HEAD = 1 << 1,
    PROTO_HTTP_POST = 1 << 2,
    PROTO_HTTP_PUT = 1 << 3,
    PROTO_HTTP_DELETE = 1 << 4,
    PROTO_HTTP_OPTIONS = 1 << 5,
    PROTO_HTTP_PATCH = 1 << 6,
    PROTO_HTTP_OTHER = 1 << 7
};

/* Indices of the kept headers when the config names none: the tally set. */
enum proto_http_tally_header {
    PROTO_HTTP_H_AUTHORIZATION = 0, /* Authorization */
    PROTO_HTTP_H_ENDPOINT = 1,      /* X-Tally-Endpoint */
    PROTO_HTTP_H_COST = 2,          /* X-Tally-Cost */
    PROTO_HTTP_H_LEASE = 3,         /* X-Tally-Lease */
    PROTO_HTTP_H_DENY_STATUS = 4,   /* X-Tally-Deny-Status */
    PROTO_HTTP_H_CALLER = 5,        /* X-Tally-Caller, up to PROTO_HTTP_H_CALLERS times */
    PROTO_HTTP_H_CALLERS = 4,
    PROTO_HTTP_H_TALLY_COUNT = 9
};

/* Why a connection or request was refused or cut, for proto_http_stats(). */
enum proto_http_reject {
    PROTO_HTTP_REJECT_BAD_REQUEST = 0,      /* 400, then close */
    PROTO_HTTP_REJECT_NOT_FOUND = 1,        /* 404 (no route) */
    PROTO_HTTP_REJECT_METHOD = 2,           /* 405 (route without this method) */
    PROTO_HTTP_REJECT_BODY_TOO_LARGE = 3,   /* 413, then close */
    PROTO_HTTP_REJECT_URL_TOO_LONG = 4,     /* 414, then close */
    PROTO_HTTP_REJECT_HEAD_TOO_LARGE = 5,   /* 431: head or a kept value too big */
    PROTO_HTTP_REJECT_TOO_MANY_HEADERS = 6, /* 431 */
    PROTO_HTTP_REJECT_RESPONSE_ERROR = 7,   /* 500: handler's answer invalid or too big */
    PROTO_HTTP_REJECT_IDLE_TIMEOUT = 8,     /* closed: idle_timeout_ms without progress */
    PROTO_HTTP_REJECT_REQUEST_TIMEOUT = 9,  /* closed: request_timeout_ms (slowloris) */
    PROTO_HTTP_REJECT_CONN_LIMIT = 10,      /* over max_connections: 503 or closed at once */
    PROTO_HTTP_REJECT_NO_MEMORY = 11,       /* accepted and closed: allocation failed */
    PROTO_HTTP_REJECT_ACCEPT_ERROR = 12,    /* accept(2) failed (EMFILE, ...) */
    PROTO_HTTP_REJECT_COUNT = 13
};

/** A byte range; `ptr` is NUL-terminated (ptr[len] == 0), or NULL when absent. */
struct proto_http_str {
    const char *ptr;
    size_t len;
};

/** What the handler sees. Every pointer is valid until the handler returns
 *  or, if it deferred the answer, until the answer is finished or cancelled. */
struct proto_http_request {
    enum proto_http_method method; /* HEAD is answered like GET, without the body */
    int http_minor;                /* 0 for HTTP/1.0, 1 for HTTP/1.1 */
    bool keep_alive;               /* the client's wish; the answer may still close */
    int route_id;                  /* the matched route's id; 0 without a route table */
    struct proto_http_str path;    /* target without query or fragment, not decoded */
    struct proto_http_str query;   /* after '?', not decoded; ptr NULL if no '?' */
    struct proto_http_str body;    /* ptr NULL when the request had none */
    /* Kept headers, in the order of the config's `headers` (or enum
     * proto_http_tally_header); ptr NULL when absent, values trimmed. */
    struct proto_http_str headers[PROTO_HTTP_KEPT_MAX];
};

/** What the handler fills (or the app, through proto_http_deferred_response()).
 *  Owned by the connection and reset per request; the handler sets the public
 *  fields directly and the rest with the functions below. A failed
 *  proto_http_response_*() call latches: the answer becomes a 500. */
struct proto_http_response {
    int status;               /* 200..599; left 0 or out of range: 500 */
    const char *content_type; /* static storage, <= 127 bytes; default "application/json" */
    bool close;               /* close the connection after this answer */
    /* Private: use the functions. */
    int error;
    unsigned headers_count;
    char headers[PROTO_HTTP_RESP_HEADERS_MAX][PROTO_HTTP_RESP_HEADER_LINE_MAX];
    char *body;
    size_t body_len;
    size_t body_cap;
};

/** The request handler: reads `req` and fills `resp` before it returns, or
 *  takes the answer over with proto_http_defer() and finishes it later. Must
 *  not call proto_http_close() on its own server. */
typedef void (*proto_http_handler_fn)(void *app_data, const struct proto_http_request *req,
                                      struct proto_http_response *resp);

/** Tells the app that deferred answer `d` will never be sent: its client went
 *  away or the server is closing. Called once per such answer, from the loop
 *  (never inside a call of the app into the server), and only for answers not
 *  finished yet; `d` is invalid once it returns: do not finish it. */
typedef void (*proto_http_cancel_fn)(void *app_data, proto_http_deferred *d);

/** A route: exact `path` (no query) answered for the methods in `methods`. */
struct proto_http_route {
    const char *path; /* borrowed for proto_http_open(); at most PROTO_HTTP_NAME_MAX bytes */
    unsigned methods; /* enum proto_http_method bits */
    int id;           /* passed to the handler as req->route_id */
};

struct proto_http_config {
    proto_http_handler_fn handler;  /* required */
    void *app_data;                 /* borrowed, passed to the handler; must outlive the server */
    proto_http_cancel_fn on_cancel; /* required to defer answers; NULL: proto_http_defer() fails */
    /* Routes: a path not listed is 404 {"error":"not_found"}, a method not listed
     * 405 with Allow. NULL: every request reaches the handler with route_id 0. */
    const struct proto_http_route *routes;
    size_t routes_count; /* at most PROTO_HTTP_ROUTES_MAX */
    /* Names of the headers to keep (matched without case); NULL: the tally set. A name
     * listed k times may appear up to k times, its values in the slots in order; one
     * more is 400 (listed once: a second is already). */
    const char *const *headers;
    size_t headers_count; /* at most PROTO_HTTP_KEPT_MAX */
    /* Limits; 0 means the default above. */
    size_t max_head_bytes;       /* request line + header section (431) */
    size_t max_url_bytes;        /* request target (414) */
    size_t max_headers;          /* header fields, kept or not (431) */
    size_t max_value_bytes;      /* value of one kept header (431) */
    size_t max_body_bytes;       /* request body, after dechunking (413) */
    size_t max_response_bytes;   /* answer body a handler may write */
    size_t read_buffer_bytes;    /* unparsed bytes held per connection */
    uint64_t idle_timeout_ms;    /* closes a connection with no progress */
    uint64_t request_timeout_ms; /* closes a request not complete this long after its first byte */
    uint64_t linger_timeout_ms;  /* after a closing answer: drain input at most this long */
    uint32_t max_connections;    /* concurrent; a few more get 503 too_many_connections
                                    and are closed, the rest are closed at once */
    int backlog;                 /* listen(2) backlog */
};

/** Counters since proto_http_open(), for /metrics. */
struct proto_http_stats {
    uint64_t connections_accepted; /* served connections (rejected ones not included) */
    uint64_t connections_active;   /* open now */
    uint64_t requests;             /* requests answered, including 4xx/5xx from the server */
    uint64_t writes;               /* writes to sockets: the answers to one read go in one */
    uint64_t writes_queued;        /* answers the socket could not take at once: reading paused */
    uint64_t deferred;             /* answers a handler deferred */
    uint64_t deferred_cancelled;   /* deferred answers never sent (on_cancel) */
    uint64_t rejected[PROTO_HTTP_REJECT_COUNT]; /* by enum proto_http_reject */
};

/** Called once every handle of a closing server is closed, right before the
 *  server is freed: `srv` is valid for proto_http_stats() and
 *  proto_http_app_data() during the call only. */
typedef void (*proto_http_close_cb)(proto_http_server *srv);

/** Creates a server on `loop` (borrowed, must outlive the server) with `cfg`
 *  (borrowed for the call: copied). *out is owned by the caller, release with
 *  proto_http_close(). TALLY_OK, TALLY_EINVAL (bad config) or TALLY_ENOMEM. */
TALLY_MUST_CHECK int proto_http_open(uv_loop_t *loop, const struct proto_http_config *cfg,
                                     proto_http_server **out /* OUT */);

/** Binds `host` (an IPv4 or IPv6 literal, borrowed) and `port` (0: ephemeral)
 *  and starts accepting. Once per server. TALLY_OK, TALLY_EINVAL (bad address,
 *  already listening), TALLY_EINUSE (address in use), TALLY_EPERM or TALLY_EIO. */
TALLY_MUST_CHECK int proto_http_listen(proto_http_server *srv, const char *host, int port);

/** The port actually bound (useful after port 0). TALLY_OK or TALLY_EINVAL
 *  when not listening. */
TALLY_MUST_CHECK int proto_http_port(const proto_http_server *srv, int *port /* OUT */);

/** Stops listening, closes every connection (answers not yet written are
 *  dropped; deferred ones not finished are cancelled: on_cancel runs for each
 *  before `cb`) and calls `cb` (may be NULL) once all handles are closed, then
 *  frees the server. Never calls `cb` or on_cancel synchronously. NULL is a
 *  no-op; a second call is ignored. */
void proto_http_close(proto_http_server *srv, proto_http_close_cb cb);

/** Copies the counters into *out. */
void proto_http_stats(const proto_http_server *srv, struct proto_http_stats *out /* OUT */);

/** The config's app_data. */
void *proto_http_app_data(const proto_http_server *srv);

/** Label of a reject reason ("too_many_headers"); static storage, never NULL. */
const char *proto_http_reject_name(enum proto_http_reject reason);

/** Finds `name` (borrowed) in req's query string: *out gets its raw value (not
 *  decoded, not NUL-terminated, valid until the handler returns). TALLY_OK or
 *  TALLY_ENOTFOUND. */
TALLY_MUST_CHECK int proto_http_query_get(const struct proto_http_request *req, const char *name,
                                          struct proto_http_str *out /* OUT */);

/** Adds header `name: value` (both copied) to resp. TALLY_OK, TALLY_EINVAL (a
 *  control character such as CR or LF, a bad name, or one the server sets:
 *  Cache-Control, Connection, Content-Length, Content-Type, Transfer-Encoding)
 *  or TALLY_ETOOBIG (too many, too long); failures latch. */
int proto_http_response_header(struct proto_http_response *resp, const char *name,
                               const char *value);

/** Appends `len` bytes of `data` (copied) to resp's body. TALLY_OK or
 *  TALLY_ETOOBIG past max_response_bytes; failures latch. */
int proto_http_response_write(struct proto_http_response *resp, const void *data, size_t len);

/** Appends printf output to resp's body. TALLY_OK or TALLY_ETOOBIG; failures latch. */
int proto_http_response_printf(struct proto_http_response *resp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Replaces resp's body with {"error":ERROR} or {"error":ERROR,"detail":DETAIL}
 *  (`detail` may be NULL; both JSON-escaped) and sets `status`. TALLY_OK or
 *  TALLY_ETOOBIG; failures latch. */
int proto_http_response_error(struct proto_http_response *resp, int status, const char *error,
                              const char *detail);

/** Takes over the answer to the request being handled: the handler returns
 *  without answering and the app finishes `d` later with
 *  proto_http_deferred_finish(). Until then the connection parses no further
 *  request (pipelined answers stay in order), its idle and request deadlines
 *  are suspended (bounding the wait is the app's job), and the bytes the
 *  request's strings point to stay valid (the struct itself does not). A
 *  client that closes, or proto_http_close(), cancels `d` through the
 *  config's on_cancel instead. `resp` is the handler's (borrowed); call from
 *  the handler only. Returns `d`, owned by the connection, valid until
 *  proto_http_deferred_finish() or until on_cancel returns; NULL if the answer
 *  cannot be deferred (no on_cancel in the config, already deferred, not
 *  called from the handler): then answer synchronously. Allocates nothing. */
proto_http_deferred *proto_http_defer(struct proto_http_response *resp);

/** The response of deferred answer `d`, filled with the same fields and
 *  functions as in the handler (what the handler already put there stays).
 *  Owned by the connection, valid until `d` is finished or cancelled. */
struct proto_http_response *proto_http_deferred_response(proto_http_deferred *d);

/** Sends `d`'s answer (a 500 if a builder failed or the status is missing, as
 *  in the handler; no body for HEAD; Connection as the request asked unless
 *  resp->close) and resumes the connection: the next pipelined request is
 *  handled on a later turn of the loop, never inside this call. May be called
 *  from the handler itself (then it answers as if never deferred). `d` is
 *  invalid afterwards and no on_cancel follows for it; if the connection is
 *  already closing (the client left or the server closes, and on_cancel has
 *  not run yet), the answer is dropped. */
void proto_http_deferred_finish(proto_http_deferred *d);

/* The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers), structured
 * fields of RFC 9651: an sf-string naming the policy, then sf-integer parameters.
 * Both write into out (cap bytes, NUL-terminated) without allocating or printf,
 * and return the length, or 0 (out "") when it does not fit, `name` (borrowed)
 * holds a byte an sf-string cannot carry unescaped (outside 0x20-0x7e, '"' or
 * '\\'), or a number is out of range (0 to 999,999,999,999,999). */
#define PROTO_RATELIMIT_VALUE_MAX 128 /* enough for any name of 63 bytes */
/** RateLimit-Policy: "name";q=QUOTA;w=WINDOW_S */
size_t proto_ratelimit_policy(char *out, size_t cap, const char *name, int64_t quota,
                              int64_t window_s);
/** RateLimit: "name";r=REMAINING;t=RESET_S, without t when reset_s < 0. */
size_t proto_ratelimit_item(char *out, size_t cap, const char *name, int64_t remaining,
                            int64_t reset_s);

#endif /* PROTO_HTTP_H */
