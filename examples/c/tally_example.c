/*
 * A small program using libtally: one blocking check, then N checks pipelined
 * on the asynchronous client driven by a poll(2) loop, printing every decision.
 *
 *     cc -o tally_example tally_example.c $(pkg-config --cflags --libs tally)
 *     ./tally_example /var/lib/tally/tally.sock "$TOKEN" search 20
 *
 * Exit status: 0 when every request got an answer (admitted or not), 1 otherwise.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include <tally.h>

#define MAX_CHECKS 10000

struct tally_counts {
    int answered, admitted, refused, other, errors;
};

static void
print_result(const char *how, int n, const struct tally_result *r)
{
    printf("%s %d: %s scope=%s", how, n, tally_status_name(r->status), r->scope);
    if (r->status == TALLY_ADMITTED)
        printf(" limit=%lld reset_ms=%lld", (long long)r->limit, (long long)r->reset_ms);
    else if (r->status == TALLY_REFUSED && r->never)
        printf(" retry_after=never");
    else if (r->status == TALLY_REFUSED || r->status == TALLY_UNAVAILABLE)
        printf(" retry_after_ms=%lld", (long long)r->retry_after_ms);
    printf("\n");
}

/* Called once per pipelined request, from tally_async_process(). */
static void
on_answer(void *user, int rc, const struct tally_result *r)
{
    struct tally_counts *c = user;

    c->answered++;
    if (rc != TALLY_OK) {
        c->errors++;
        printf("async %d: error %s\n", c->answered, tally_strerror(rc));
        return;
    }
    if (r->status == TALLY_ADMITTED)
        c->admitted++;
    else if (r->status == TALLY_REFUSED)
        c->refused++;
    else
        c->other++;
    print_result("async", c->answered, r);
}

static int
blocking_check(const char *where, const char *token, const char *endpoint)
{
    tally_client *c = NULL;
    struct tally_result r;
    int rc = tally_client_open(where, 2000, &c);

    if (rc == TALLY_OK)
        rc = tally_check(c, token, endpoint, 0, &r);
    if (rc == TALLY_OK)
        print_result("blocking", 1, &r);
    else
        fprintf(stderr, "tally_example: blocking check: %s\n", tally_strerror(rc));
    tally_client_close(c);
    return rc;
}

static int
pipelined_checks(const char *where, const char *token, const char *endpoint, int n)
{
    struct tally_counts counts = {0, 0, 0, 0, 0};
    tally_async *a = NULL;
    int rc = tally_async_open(where, 2000, (unsigned)n, &a);
    int i;

    for (i = 0; rc == TALLY_OK && i < n; i++)
        rc = tally_async_check(a, token, endpoint, 0, on_answer, &counts);
    /* The event loop: wait for the socket, let libtally write and read. */
    while (rc >= 0 && tally_async_pending(a) > 0) {
        struct pollfd p = {tally_async_fd(a), POLLIN, 0};
        if (tally_async_wants_write(a))
            p.events |= POLLOUT;
        if (poll(&p, 1, 5000) == 0) {
            fprintf(stderr, "tally_example: no answer in 5 s\n");
            break;
        }
        rc = tally_async_process(a);
    }
    tally_async_close(a); /* anything still pending is cancelled here */
    printf("async total: admitted=%d refused=%d other=%d errors=%d\n", counts.admitted,
           counts.refused, counts.other, counts.errors);
    if (rc < 0)
        fprintf(stderr, "tally_example: pipelined checks: %s\n", tally_strerror(rc));
    return rc < 0 ? rc : (counts.answered == n && counts.errors == 0 ? TALLY_OK : TALLY_EIO);
}

int
main(int argc, char **argv)
{
    int n = argc > 4 ? atoi(argv[4]) : 10;

    if (argc < 4 || n < 0 || n > MAX_CHECKS) {
        fprintf(stderr, "usage: tally_example SOCKET|tcp:HOST:PORT TOKEN ENDPOINT [N (<= %d)]\n",
                MAX_CHECKS);
        return 64;
    }
    if (blocking_check(argv[1], argv[2], argv[3]) != TALLY_OK)
        return 1;
    if (n > 0 && pipelined_checks(argv[1], argv[2], argv[3], n) != TALLY_OK)
        return 1;
    return 0;
}
