/* What one kernel operation costs when caches are cold: the floor under a
 * usescope scrape, item by item.
 *
 *   cc -O2 -o cold_costs bench/cold-costs/cold_costs.c
 *   ./cold_costs [-e MiB] [-r ROUNDS] ITEM...
 *
 * Before each timed item the program writes -e MiB of memory (default 2;
 * 64 is colder) and sleeps 20 ms, as a scrape every few seconds finds the
 * caches. ITEM is:
 *   PATH          an existing file: pread from offset 0 to the end on a
 *                 descriptor opened once (what usescope does each scrape);
 *                 a missing path: one failed stat() (a failed path walk)
 *   @poll         poll() over 256 fd slots, no events (the old fd count)
 *   @fdcount      fstat() of /proc/self/fd (the fd count since Linux 6.2)
 *   @getlink      an RTM_GETLINK dump of every interface over rtnetlink
 *   @udpdiag      a sock_diag dump of every UDP socket, IPv4 then IPv6
 *                 (what /proc/net/udp and udp6 list)
 * Prints the mean time per item over the rounds (default 200). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 17];

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Sends a netlink dump request and reads replies until the dump ends. */
static void dump(int nl, const void *req, size_t len) {
    if (send(nl, req, len, 0) < 0) return;
    for (;;) {
        int n = recv(nl, buf, sizeof buf, 0);
        if (n <= 0) return;
        for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n))
            if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) return;
    }
}

static void getlink(int nl) {
    struct {
        struct nlmsghdr n;
        struct ifinfomsg i;
    } req = {0};
    req.n.nlmsg_len = sizeof req;
    req.n.nlmsg_type = RTM_GETLINK;
    req.n.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.i.ifi_family = AF_UNSPEC;
    dump(nl, &req, sizeof req);
}

static void udpdiag(int nl, int family) {
    struct {
        struct nlmsghdr n;
        struct inet_diag_req_v2 r;
    } req = {0};
    req.n.nlmsg_len = sizeof req;
    req.n.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.n.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.r.sdiag_family = family;
    req.r.sdiag_protocol = IPPROTO_UDP;
    req.r.idiag_states = ~0u;
    dump(nl, &req, sizeof req);
}

int main(int argc, char **argv) {
    long evict_mib = 2, rounds = 200;
    int opt;
    while ((opt = getopt(argc, argv, "e:r:")) != -1) {
        if (opt == 'e') evict_mib = atol(optarg);
        else if (opt == 'r') rounds = atol(optarg);
        else return 2;
    }
    int items = argc - optind;
    if (items <= 0) {
        fprintf(stderr, "usage: %s [-e MiB] [-r ROUNDS] ITEM...\n", argv[0]);
        return 2;
    }
    size_t junk_len = (size_t)evict_mib << 20;
    char *junk = malloc(junk_len ? junk_len : 1);
    memset(junk, 1, junk_len);
    int *fd = calloc(items, sizeof *fd);
    double *total = calloc(items, sizeof *total);
    int fds_dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY);
    int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    int diag = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    for (int i = 0; i < items; i++)
        fd[i] = argv[optind + i][0] == '@' ? -1 : open(argv[optind + i], O_RDONLY);
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < items; i++) {
            const char *item = argv[optind + i];
            for (size_t k = 0; k < junk_len; k += 64) junk[k]++;
            usleep(20000);
            double start = now_us();
            struct stat st;
            if (!strcmp(item, "@poll")) {
                struct pollfd p[256];
                for (int k = 0; k < 256; k++) p[k] = (struct pollfd){.fd = k};
                poll(p, 256, 0);
            } else if (!strcmp(item, "@fdcount")) {
                fstat(fds_dir, &st);
            } else if (!strcmp(item, "@getlink")) {
                getlink(nl);
            } else if (!strcmp(item, "@udpdiag")) {
                udpdiag(diag, AF_INET);
                udpdiag(diag, AF_INET6);
            } else if (fd[i] < 0) {
                stat(item, &st);
            } else {
                off_t off = 0;
                ssize_t n;
                while ((n = pread(fd[i], buf, sizeof buf, off)) > 0) off += n;
            }
            total[i] += now_us() - start;
        }
    }
    for (int i = 0; i < items; i++)
        printf("%-40s %7.1f us\n", argv[optind + i], total[i] / rounds);
    return 0;
}
