// SPDX-License-Identifier: BSD-2-Clause
// A test process for interrupt_cleanup_test: registers a cleanup that removes
// MARKER, starts a child (sleep), prints "ready CHILD_PID" and then, by MODE:
//   wait       waits for a signal
//   return     returns from main() (dropping the registration) as soon as a
//              signal was caught
//   segv       writes through a null pointer
//   abort      calls abort()
//   withdrawn  drops the registration first, then waits for a signal
#include "interrupt_cleanup.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MARKER wait|return|segv|abort|withdrawn\n", argv[0]);
        return 2;
    }
    const std::string marker = argv[1], mode = argv[2];
    if (FILE *f = std::fopen(marker.c_str(), "w"))
        std::fclose(f);
    else
        return 2;
    auto cleanup =
        std::make_unique<incxdp::test::CleanupOnInterrupt>([marker] { unlink(marker.c_str()); });
    if (mode == "withdrawn")
        cleanup.reset();

    pid_t child = fork();
    if (child == 0) {
        execlp("sleep", "sleep", "300", static_cast<char *>(nullptr));
        _exit(127);
    }
    std::printf("ready %d\n", int(child));
    std::fflush(stdout);

    if (mode == "segv") {
        volatile int *p = nullptr;
        *p = 1;
    } else if (mode == "abort") {
        std::abort();
    } else if (mode == "return") {
        while (!incxdp::test::interrupt_detail::g_caught)
            usleep(1000);
        return 0;
    }
    for (;;)
        pause();
}
