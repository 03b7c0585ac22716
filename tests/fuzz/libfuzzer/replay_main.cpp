// SPDX-License-Identifier: BSD-2-Clause
// The normal build's driver of a libFuzzer harness: feeds every file of the
// given corpus directories (or files) to LLVMFuzzerTestOneInput once, so
// ctest exercises the harness and every committed reproducer without clang.
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <typeinfo>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    namespace fs = std::filesystem;
    std::vector<fs::path> files;
    for (int i = 1; i < argc; i++) {
        fs::path p = argv[i];
        if (fs::is_directory(p)) {
            for (const auto &e : fs::recursive_directory_iterator(p))
                if (e.is_regular_file())
                    files.push_back(e.path());
        } else if (fs::is_regular_file(p)) {
            files.push_back(p);
        } else {
            std::fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
            return 1;
        }
    }
    if (files.empty()) {
        std::fprintf(stderr, "replay: no inputs (usage: %s CORPUS_DIR|FILE...)\n", argv[0]);
        return 1;
    }
    std::sort(files.begin(), files.end());
    size_t failed = 0; // inputs whose exception escaped; property checks abort at once
    for (const auto &f : files) {
        std::ifstream in(f, std::ios::binary);
        std::vector<char> buf((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
        std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), buf.size());
        // A copy of exactly the input's size, so reads past it are caught
        // by sanitizers as they would be under libFuzzer.
        std::vector<uint8_t> data(buf.begin(), buf.end());
        try {
            LLVMFuzzerTestOneInput(data.data(), data.size());
        } catch (const std::exception &e) {
            // libFuzzer reports this as a crash (std::terminate); say it plainly.
            int st = 0;
            char *type = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &st);
            std::fprintf(stderr, "replay: %s: uncaught %s: %s\n", f.c_str(),
                         st == 0 ? type : typeid(e).name(), e.what());
            std::free(type);
            failed++;
        }
    }
    if (failed) {
        std::printf("replay: %zu inputs, %zu threw\n", files.size(), failed);
        return 1;
    }
    std::printf("replay: %zu inputs, no property violated\n", files.size());
    return 0;
}
