/* tcp: the socket calls the rendezvous needs, non-blocking and each bounded by a deadline, so a
 * peer that died or never came cannot hang a process. */
#include "runtime/tcp.h"
#include "base/clock.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int tcp_ms_until(double deadline) {
    double ms = (deadline - clock_seconds()) * 1000.0;
    if (ms <= 0) return 0;
    return ms > 1e9 ? 1000000000 : (int)ms + 1; /* round up: never wake just before it */
}

/* 1 when fd is ready for `events`, 0 at the deadline, -1 on error. */
static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int ms = tcp_ms_until(deadline);
        int rc = poll(&p, 1, ms);
        if (rc > 0) return 1;
        if (rc == 0 && ms == 0) return 0;
        if (rc < 0 && errno != EINTR) return -1;
    }
}

/* Small messages go out at once instead of waiting for the previous one's ACK (Nagle). */
static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int listen_on(int family, int port) {
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_storage addr = {0};
    socklen_t len;
    if (family == AF_INET6) { /* IPv4 peers too, as mapped addresses */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&addr;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_any;
        a->sin6_port = htons((unsigned short)port);
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&addr;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        a->sin_port = htons((unsigned short)port);
        len = sizeof *a;
    }
    if (bind(fd, (struct sockaddr *)&addr, len) != 0 || listen(fd, SOMAXCONN) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int tcp_listen(int port) {
    int fd = listen_on(AF_INET6, port);
    if (fd >= 0 || errno == EADDRINUSE || errno == EACCES) return fd;
    return listen_on(AF_INET, port); /* a host without IPv6 */
}

int tcp_accept(int listen_fd) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) set_nodelay(fd);
    return fd;
}

static int connect_one(const struct addrinfo *ai, double deadline, char *why, size_t n) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        snprintf(why, n, "%s", strerror(errno));
        return -1;
    }
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
            int ready = wait_fd(fd, POLLOUT, deadline);
            socklen_t len = sizeof err;
            if (ready == 0)
                err = ETIMEDOUT;
            else if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
        }
    }
    if (err) {
        snprintf(why, n, "%s", err == ETIMEDOUT ? "no answer" : strerror(err));
        close(fd);
        return -1;
    }
    set_nodelay(fd);
    return fd;
}

int tcp_connect(const char *host, int port, double deadline, char *why, size_t n) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &list);
    if (rc) {
        snprintf(why, n, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next)
        fd = connect_one(ai, deadline, why, n);
    freeaddrinfo(list);
    return fd;
}

int tcp_send_all(int fd, const void *buf, size_t n, double deadline) {
    const char *p = buf;
    while (n > 0) {
        /* MSG_NOSIGNAL: a peer that went away is an error to report, not a SIGPIPE */
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (errno == EPIPE || errno == ECONNRESET) return TCP_CLOSED;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return TCP_FAILED;
        int ready = wait_fd(fd, POLLOUT, deadline);
        if (ready == 0) return TCP_TIMEOUT;
        if (ready < 0) return TCP_FAILED;
    }
    return TCP_OK;
}

int tcp_recv_some(int fd, void *buf, size_t n, size_t *got) {
    while (*got < n) {
        ssize_t k = recv(fd, (char *)buf + *got, n - *got, 0);
        if (k > 0) {
            *got += (size_t)k;
            continue;
        }
        if (k == 0 || errno == ECONNRESET) return TCP_CLOSED;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return TCP_OK;
        if (errno != EINTR) return TCP_FAILED;
    }
    return TCP_OK;
}

int tcp_recv_all(int fd, void *buf, size_t n, double deadline) {
    size_t got = 0;
    for (;;) {
        int rc = tcp_recv_some(fd, buf, n, &got);
        if (rc != TCP_OK || got == n) return rc;
        int ready = wait_fd(fd, POLLIN, deadline);
        if (ready == 0) return TCP_TIMEOUT;
        if (ready < 0) return TCP_FAILED;
    }
}
