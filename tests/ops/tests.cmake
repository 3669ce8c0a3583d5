# The kernels' end-to-end checks run them inside the decoder (a cached decode of the tiny model against
# its full forward), and the length-bucket checks build the decoder's attention masks.
target_link_libraries(test-ops PRIVATE rayless_model)
