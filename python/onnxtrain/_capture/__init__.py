"""Capturing a module's call as an ONNX graph: torch.export then onnxtrain's direct translation (aten_to_onnx with
aten_math, aten_shapes, aten_convolutions, aten_values and graph_builder), or PyTorch's exporters as fallbacks
(export_program, export_torchscript with symbolics and torchscript_ops), translations shared by all three
(translations); export ties them together for one call and its input schema (input_schema), in a forked child
(capture_process) one at a time (capture_lock), with a disk cache of captured graphs (capture_cache, keyed by
fingerprint)."""
