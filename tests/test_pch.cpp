// Hosts the precompiled header the Catch2 test programs share (tests/CMakeLists.txt); nothing else.
