/* tcp: the few socket calls the rendezvous needs, each one bounded by a deadline (a time on
 * the monotonic clock) so that a peer that died, or never came, cannot hang a process.
 * Plain POSIX sockets, non-blocking, close-on-exec; touches nothing else. */
#ifndef FSDP_TCP_H
#define FSDP_TCP_H

#include <stddef.h>

#include "base/clock.h" /* deadlines are clock_seconds() + a timeout */

/* What a transfer came to. */
enum { TCP_OK = 0, TCP_TIMEOUT, TCP_CLOSED, TCP_FAILED };

/* Listens on `port` on every address of this host (IPv6 and IPv4 where the host has IPv6),
 * with SO_REUSEADDR so that a restarted job takes the port back at once. Returns the socket,
 * or -1 with errno set. */
int tcp_listen(int port);

/* Accepts one waiting connection: its socket, or -1 when none is waiting (or on error). */
int tcp_accept(int listen_fd);

/* One attempt to connect to host:port, given up at `deadline`. Returns the socket, or -1
 * with a few words on why in why[n] ("Connection refused", "no answer"). */
int tcp_connect(const char *host, int port, double deadline, char *why, size_t n);

/* All n bytes, or TCP_TIMEOUT at the deadline, TCP_CLOSED when the peer has gone. */
int tcp_send_all(int fd, const void *buf, size_t n, double deadline);
int tcp_recv_all(int fd, void *buf, size_t n, double deadline);

/* What is there now, without waiting: adds the bytes read to *got. TCP_OK (perhaps having
 * read nothing), TCP_CLOSED or TCP_FAILED. */
int tcp_recv_some(int fd, void *buf, size_t n, size_t *got);

/* Milliseconds from now to `deadline` for poll(): 0 once it has passed. */
int tcp_ms_until(double deadline);

#endif
