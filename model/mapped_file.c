/*
 * mapped_file.c - open + fstat + mmap of a model file (see mapped_file.h).
 */
#include "mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mapped_file_open(MappedFile *mf, const char *path, Error *err) {
    memset(mf, 0, sizeof *mf);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error_set(err, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    const char *why = NULL;
    int e = 0;
    if (fstat(fd, &sb) != 0) e = errno;
    else if (!S_ISREG(sb.st_mode)) why = "is not a regular file";
    else if (sb.st_size == 0) why = "is empty";
    if (e || why) {
        close(fd);
        return e ? error_set(err, "cannot stat %s: %s", path, strerror(e))
                 : error_set(err, "%s %s", path, why);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    e = errno;
    close(fd);
    if (map == MAP_FAILED) return error_set(err, "cannot mmap %s: %s", path, strerror(e));
    char *copy = strdup(path);
    if (!copy) {
        munmap(map, (size_t)sb.st_size);
        return error_set(err, "out of memory");
    }
    *mf = (MappedFile){copy, map, (size_t)sb.st_size};
    return 0;
}

void mapped_file_close(MappedFile *mf) {
    if (mf->map) munmap(mf->map, mf->size);
    free(mf->path);
    memset(mf, 0, sizeof *mf);
}
