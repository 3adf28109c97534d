/* A persistent task program in C, written from docs/task-protocol.md alone: no knarr code, no JSON library.
 *
 * Says hello, then for each task frame answers a result: stdout = "<id>:" followed by the task's
 * stdin, exit code 0. A stdin of "crash" aborts the program mid-task (SIGABRT); "fail" answers exit
 * code 5 with "failed" on stderr. Ends when its stdin closes.
 *
 * It reads only the "id" of the header (task ids are plain text: no escapes in them).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_exactly(void *buf, size_t size) {
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(0, (char *)buf + got, size - got);
        if (n <= 0) return got == 0 && n == 0 ? 0 : -1;
        got += (size_t)n;
    }
    return 1;
}

static void write_all(const void *buf, size_t size) {
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(1, (const char *)buf + done, size - done);
        if (n <= 0) exit(2);
        done += (size_t)n;
    }
}

static void put_u32(unsigned char *at, uint32_t value) {
    at[0] = value >> 24; at[1] = value >> 16; at[2] = value >> 8; at[3] = value;
}

static uint32_t get_u32(const unsigned char *at) {
    return (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 | (uint32_t)at[2] << 8 | at[3];
}

static void write_frame(const char *header, const char *body, size_t body_len) {
    /* one write per frame: the worker then reads the whole answer in one go */
    size_t header_len = strlen(header);
    unsigned char *frame = malloc(12 + header_len + body_len);
    if (!frame) exit(2);
    memcpy(frame, "KNRF", 4);
    put_u32(frame + 4, (uint32_t)header_len);
    put_u32(frame + 8, (uint32_t)body_len);
    memcpy(frame + 12, header, header_len);
    memcpy(frame + 12 + header_len, body, body_len);
    write_all(frame, 12 + header_len + body_len);
    free(frame);
}

int main(void) {
    write_frame("{\"type\":\"hello\",\"protocol\":1}", "", 0);
    for (;;) {
        unsigned char prefix[12];
        int got = read_exactly(prefix, 12);
        if (got == 0) return 0; /* stdin closed: the worker wants us gone */
        if (got < 0 || memcmp(prefix, "KNRF", 4) != 0) return 3;
        uint32_t header_len = get_u32(prefix + 4), body_len = get_u32(prefix + 8);
        char *header = malloc(header_len + 1), *body = malloc(body_len + 1);
        if (!header || !body || read_exactly(header, header_len) != 1 || (body_len && read_exactly(body, body_len) != 1))
            return 3;
        header[header_len] = 0;
        body[body_len] = 0;

        char id[256] = "";
        const char *key = strstr(header, "\"id\":\"");
        if (key) {
            key += 6;
            size_t n = strcspn(key, "\"");
            if (n >= sizeof id) n = sizeof id - 1;
            memcpy(id, key, n);
            id[n] = 0;
        }
        if (strcmp(body, "crash") == 0) abort();

        char reply[512], out[1024];
        if (strcmp(body, "fail") == 0) {
            snprintf(reply, sizeof reply, "{\"type\":\"result\",\"id\":\"%s\",\"exit_code\":5,\"stdout_bytes\":0}", id);
            write_frame(reply, "failed\n", 7);
        } else {
            int n = snprintf(out, sizeof out, "%s:%s", id, body);
            if (n >= (int)sizeof out) n = sizeof out - 1;
            snprintf(reply, sizeof reply, "{\"type\":\"result\",\"id\":\"%s\",\"exit_code\":0,\"stdout_bytes\":%d}", id, n);
            write_frame(reply, out, (size_t)n);
        }
        free(header);
        free(body);
    }
}
