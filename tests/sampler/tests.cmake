# the engine's copies between host and device do not stall a GPU (issue 47 item 3): copies to the
# device through pinned memory, reads to the host only in a look and at the end
add_test(NAME sampler-engine-device-copies
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/engine_device_copies.py ${CMAKE_SOURCE_DIR})
