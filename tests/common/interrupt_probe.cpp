// SPDX-License-Identifier: BSD-2-Clause
// A test process for interrupt_cleanup_test: registers a cleanup that removes
// MARKER, starts a child, prints "ready CHILD_PID" and then, by MODE:
//   wait       waits for a signal
//   return     returns from main() (dropping the registration) as soon as a
//              signal was caught
//   segv       writes through a null pointer
//   abort      calls abort()
//   withdrawn  drops the registration first, then waits for a signal
//   hang       its cleanup removes MARKER and never returns; 1 s backstop
//   forked     as wait, but the child is forked without exec (it inherits
//              the handlers) and waits for a signal itself
// The child is `sleep 300` except in mode forked.
#include "interrupt_cleanup.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unistd.h>

int main(int argc, char **argv) {
    namespace it = incxdp::test;
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MARKER wait|return|segv|abort|withdrawn|hang|forked\n",
                     argv[0]);
        return 2;
    }
    const std::string marker = argv[1], mode = argv[2];
    if (FILE *f = std::fopen(marker.c_str(), "w"))
        std::fclose(f);
    else
        return 2;
    const bool hang = mode == "hang";
    if (hang)
        it::interrupt_detail::g_backstop_seconds = 1;
    auto cleanup = std::make_unique<it::CleanupOnInterrupt>([marker, hang] {
        unlink(marker.c_str());
        while (hang)
            pause();
    });
    if (mode == "withdrawn")
        cleanup.reset();

    pid_t child = fork();
    if (child == 0) {
        if (mode == "forked")
            for (;;)
                pause();
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
        while (!it::interrupt_detail::g_caught)
            usleep(1000);
        return 0;
    }
    for (;;)
        pause();
}
