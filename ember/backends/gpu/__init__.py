"""What the CUDA and ROCm backends share: kernel code generation (:mod:`.codegen`), the host/device
split and launch plans (:mod:`.build`), and GPU host and device modules (:mod:`.module`)."""
