#pragma once
// The leak listener every test runner registers (leak_listener.cpp): each
// test case must end with no outstanding pooled buffer in any TestContext it
// made (support.h), in the host pool nor in the pool of the context's device.

namespace forge_test {

// The runner's exit status: `failed` (Catch's), or 1 when it is 0 and some
// test case leaked, after saying how many did.
int exit_status_with_leaks(int failed);

}  // namespace forge_test
