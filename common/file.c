/*
 * common/file.c - see file.h.
 */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int gm_file_sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    int fd, err = 0;

    if (slash == NULL)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (dir == NULL)
        return -ENOMEM;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        err = -errno;
    } else {
        /* Some file systems cannot sync a directory (EINVAL); the rename is done either way. */
        if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
            err = -errno;
        close(fd);
    }
    free(dir);
    return err;
}

int gm_file_write_atomic(const char *path, const void *data, size_t len, int mode)
{
    const uint8_t *p = data;
    char *tmp = NULL;
    int fd, err = 0;

    if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0)
        return -ENOMEM;
    (void)unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) {
        err = -errno;
        free(tmp);
        return err;
    }
    if (fchmod(fd, (mode_t)mode) != 0) /* the mode asked for, whatever the umask */
        err = -errno;
    while (err == 0 && len > 0) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err = w < 0 ? -errno : -EIO;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    if (err == 0 && fsync(fd) != 0)
        err = -errno;
    if (close(fd) != 0 && err == 0)
        err = -errno;
    if (err == 0 && rename(tmp, path) != 0)
        err = -errno;
    if (err != 0)
        (void)unlink(tmp);
    else
        err = gm_file_sync_dir(path);
    free(tmp);
    return err;
}

int gm_file_read(const char *path, size_t max, char **out, size_t *len)
{
    struct stat st;
    char *buf = NULL;
    size_t have = 0;
    int fd, err = 0;

    *out = NULL;
    *len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        err = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        err = -EINVAL;
        goto out;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > max) {
        err = -EFBIG;
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        err = -ENOMEM;
        goto out;
    }
    while (have < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + have, (size_t)st.st_size - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err = -errno;
            goto out;
        }
        if (n == 0)
            break; /* the file shrank while we read it: what is there */
        have += (size_t)n;
    }
    buf[have] = '\0';
    *out = buf;
    *len = have;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return err;
}
