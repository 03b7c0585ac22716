// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/util/fd.h>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <type_traits>
#include <unistd.h>
#include <utility>

using incxdp::util::Fd;

namespace {

bool is_open(int fd) {
    return fcntl(fd, F_GETFD) >= 0;
}

int open_null() {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    return fd;
}

} // namespace

static_assert(!std::is_copy_constructible_v<Fd> && !std::is_copy_assignable_v<Fd>);
static_assert(std::is_nothrow_move_constructible_v<Fd> && std::is_nothrow_move_assignable_v<Fd>);

TEST(Fd, ClosesOnDestruction) {
    const int raw = open_null();
    {
        Fd fd(raw);
        EXPECT_TRUE(fd);
        EXPECT_EQ(fd.get(), raw);
        EXPECT_TRUE(is_open(raw));
    }
    EXPECT_FALSE(is_open(raw));
    EXPECT_FALSE(Fd());
    EXPECT_EQ(Fd().get(), -1);
}

TEST(Fd, MovesOwnership) {
    const int raw = open_null();
    Fd a(raw);
    Fd b(std::move(a));
    EXPECT_FALSE(a);
    EXPECT_EQ(b.get(), raw);

    const int other = open_null();
    Fd c(other);
    c = std::move(b); // closes what c held
    EXPECT_FALSE(is_open(other));
    EXPECT_EQ(c.get(), raw);
    EXPECT_TRUE(is_open(raw));
    c = std::move(c); // self-move keeps the fd
    EXPECT_TRUE(is_open(raw));
    EXPECT_EQ(c.get(), raw);
}

TEST(Fd, ReleaseGivesUpAndResetCloses) {
    const int raw = open_null();
    int released = -1;
    {
        Fd fd(raw);
        released = fd.release();
        EXPECT_FALSE(fd);
    }
    EXPECT_EQ(released, raw);
    EXPECT_TRUE(is_open(raw));

    Fd fd(raw);
    const int next = open_null();
    fd.reset(next);
    EXPECT_FALSE(is_open(raw));
    EXPECT_EQ(fd.get(), next);
    fd.reset();
    EXPECT_FALSE(is_open(next));
    EXPECT_FALSE(fd);
}
