/*
 * A raw HTTP/1.1 client for the suites of the HTTP server: libuv TCP clients
 * on the test's own loop, sending bytes exactly as given, and http_parser
 * reading the answers into a table a test can check. Time is never slept:
 * TEST_HTTP_WAIT runs the loop until a condition holds, and a guard timer
 * fails a test that waits too long. Every answer read is checked for
 * Cache-Control: no-store. Below the client, the standard server of the
 * suites: a fixture with a route table and a handler that records what it saw.
 *
 * Header-wide rules: functions fail the running cmocka test (they assert), so
 * call them from a test only, on the thread that runs the loop. Clients are
 * owned by their env, released with it.
 */
#ifndef TEST_HTTP_CLIENT_H
#define TEST_HTTP_CLIENT_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto_http.h"

#define TEST_HTTP_GUARD_MS    10000 /* a wait longer than this is a failure */
#define TEST_HTTP_CLIENTS_MAX 8     /* per env */
#define TEST_HTTP_RESPS_MAX   1100  /* answers kept per client; more is a parse error */

/** One answer as read, strings NUL-terminated (truncated when longer). */
struct test_http_resp {
    int status;
    bool no_store;   /* Cache-Control: no-store */
    bool has_length; /* Content-Length present */
    char connection[32], allow[64], x_seq[16], x_test[16], content_type[64];
    char body[512];
    size_t body_len; /* the whole body's length, even past sizeof(body) - 1 */
};

struct test_http_env;

/** A client connection. Tests read the fields; the harness writes them. */
struct test_http_client {
    struct test_http_env *env;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    char *out;         /* bytes being sent */
    bool paused;       /* not reading until test_http_client_resume() */
    bool head_answers; /* answers are to HEAD: no body (set before they arrive) */
    bool writing;      /* a send is in flight */
    bool done;         /* the server closed (read_status says how) */
    bool closed;       /* our handle is closed */
    bool parse_error;  /* the answers were not valid HTTP */
    int read_status;   /* UV_EOF or an error once `done` */
    struct test_http_resp *resps;
    size_t n_resps; /* complete answers in resps */
    /* Private. */
    http_parser rp;
    char field[64], value[256];
    size_t field_len, value_len;
    bool in_value;
    char rbuf[65536];
};

/** Bytes sent one at a time by a timer (slow clients). */
struct test_http_trickle {
    struct test_http_client *c;
    const char *bytes;
    size_t pos, len;
};

/** A loop, a guard timer and the clients of one test; embed it in the fixture. */
struct test_http_env {
    uv_loop_t loop;
    uv_timer_t guard;
    bool timed_out;
    int port; /* the server's; set before opening clients */
    struct test_http_client *clients[TEST_HTTP_CLIENTS_MAX];
    size_t n_clients;
    uv_timer_t trickle; /* closed by release, even after a failed wait */
    struct test_http_trickle tr;
};

/** Runs env's loop until `cond` holds; fails the test after TEST_HTTP_GUARD_MS. */
#define TEST_HTTP_WAIT(env, cond)                                                                  \
    do {                                                                                           \
        test_http_wait_begin(env);                                                                 \
        while (!(cond) && !(env)->timed_out)                                                       \
            uv_run(&(env)->loop, UV_RUN_ONCE);                                                     \
        test_http_wait_end(env);                                                                   \
    } while (0)

/** Initialises env (caller-allocated, zeroed or not): its loop and timers.
 *  Release with test_http_env_release(). */
void test_http_env_init(struct test_http_env *env);

/** Closes every client and env's timers, runs the loop dry (close whatever
 *  else the test opened first, e.g. the server), checks uv_loop_close() == 0
 *  and frees the clients. */
void test_http_env_release(struct test_http_env *env);

/** Arms the guard of TEST_HTTP_WAIT. */
void test_http_wait_begin(struct test_http_env *env);

/** Stops the guard; fails the test if it fired. */
void test_http_wait_end(struct test_http_env *env);

/** Connects a client to 127.0.0.1:env->port that sends `req` (NUL-terminated,
 *  copied; NULL: nothing) once connected and reads the answers unless
 *  `paused`. `rcvbuf` > 0 shrinks its receive buffer so the server's writes
 *  back up. Returns the client, owned by env, valid until
 *  test_http_env_release() or test_http_client_drop(). */
struct test_http_client *test_http_client_open(struct test_http_env *env, const char *req,
                                               bool paused, int rcvbuf);

/** Sends `len` bytes of `data` (copied); the previous send must be done. */
void test_http_client_send(struct test_http_client *c, const char *data, size_t len);

/** Starts reading the answers of a client opened paused. */
void test_http_client_resume(struct test_http_client *c);

/** Closes c's connection (a reset if answers are unread); c stays readable. */
void test_http_client_close(struct test_http_client *c);

/** Closes the client opened last, waits for its close and frees it, so a
 *  test can open more than TEST_HTTP_CLIENTS_MAX one after another. */
void test_http_client_drop(struct test_http_env *env);

/** Sends `req` on a new connection and waits for one answer with `status`,
 *  `Connection: close` and a clean close. Returns the answer, valid as its
 *  client. */
struct test_http_resp *test_http_one_shot(struct test_http_env *env, const char *req, int status);

/** Sends `bytes` (borrowed until it returns) on c, one every `every_ms` until
 *  they run out, and waits for an answer or the server's close. */
void test_http_trickle(struct test_http_env *env, struct test_http_client *c, const char *bytes,
                       uint64_t every_ms);

/** A request for /ping whose head is exactly `size` bytes; free() it. */
char *test_http_request_of_size(size_t size);

/* --- the suites' server ---------------------------------------------------- */

#define TEST_HTTP_FILL_BYTES 8000 /* body of /fill */

/** Routes of the standard config, answered by test_http_handler(). */
enum test_http_route {
    TEST_HTTP_R_PING = 1,  /* GET: "pong" */
    TEST_HTTP_R_ECHO,      /* GET, POST: the query, or "-" */
    TEST_HTTP_R_FILL,      /* GET: TEST_HTTP_FILL_BYTES bytes, X-Seq: the query */
    TEST_HTTP_R_BIG,       /* GET: a body past the limit (500) */
    TEST_HTTP_R_CLOSE,     /* GET: "bye", then close */
    TEST_HTTP_R_EMPTY,     /* POST: 204 with X-Test: yes and a body that must be dropped */
    TEST_HTTP_R_BADSTATUS, /* GET: status 0 (500) */
    TEST_HTTP_R_BADHEADER, /* GET: a header with CR LF (500) */
    TEST_HTTP_R_BADTYPE    /* GET: a content type with CR LF (500) */
};

/** What the handler saw last, copied (the request's pointers die with the call). */
struct test_http_seen {
    enum proto_http_method method;
    int http_minor;
    char path[128];
    char query[128];
    bool has_query;
    size_t body_len;
    char h[PROTO_HTTP_KEPT_MAX][700];
    bool has_h[PROTO_HTTP_KEPT_MAX];
};

/** A server on env's loop at 127.0.0.1:0 and what its handler saw. Embed it
 *  first in a larger fixture to extend it (cfg.app_data must point to it). */
struct test_http_fixture {
    struct test_http_env env;
    struct proto_http_config cfg; /* standard routes and handler; edit before start */
    proto_http_server *srv;       /* NULL: not started, or closed by the test */
    bool srv_closed;              /* test_http_srv_closed() ran */
    int handled;                  /* calls of test_http_handler() */
    struct test_http_seen seen;
};

/** The standard handler (`app_data`: the fixture): records the request in
 *  fx->seen and answers as enum test_http_route says. Without a route table
 *  it answers 200 with the path. */
void test_http_handler(void *app_data, const struct proto_http_request *req,
                       struct proto_http_response *resp);

/** Initialises fx (caller-allocated): env, and cfg with the standard routes
 *  and handler. Release with test_http_fixture_release(). */
void test_http_fixture_init(struct test_http_fixture *fx);

/** Closes the server (if the test did not), releases env, checks the close
 *  callback ran and resets the allocation hook. */
void test_http_fixture_release(struct test_http_fixture *fx);

/** cmocka setup: *state gets a fixture (test_http_fixture_init()). */
int test_http_setup(void **state);

/** cmocka teardown of test_http_setup(). */
int test_http_teardown(void **state);

/** Opens fx->srv with fx->cfg, listens on 127.0.0.1:0, sets env.port. */
void test_http_start(struct test_http_fixture *fx);

/** The server's counters now. */
struct proto_http_stats test_http_stats(struct test_http_fixture *fx);

/** A proto_http_close_cb setting srv_closed of the fixture in app_data. */
void test_http_srv_closed(proto_http_server *srv);

#endif /* TEST_HTTP_CLIENT_H */
