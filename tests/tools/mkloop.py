# mkloop.py FILE M: an ONNX model whose Loop adds 1 to a carried value M times
# (the condition stays true), for the cap on Loop trip counts.
import sys
import onnx
from onnx import helper, TensorProto as T
m_val = int(sys.argv[2])
body = helper.make_graph(
    [helper.make_node("Identity", ["c_in"], ["c_out"]),
     helper.make_node("Add", ["v_in", "one"], ["v_out"])],
    "body",
    [helper.make_tensor_value_info("i", T.INT64, []),
     helper.make_tensor_value_info("c_in", T.BOOL, []),
     helper.make_tensor_value_info("v_in", T.FLOAT, [1])],
    [helper.make_tensor_value_info("c_out", T.BOOL, []),
     helper.make_tensor_value_info("v_out", T.FLOAT, [1])],
    [helper.make_tensor("one", T.FLOAT, [1], [1.0])])
g = helper.make_graph(
    [helper.make_node("Loop", ["M", "cond", "v0"], ["v"], body=body)],
    "loop",
    [helper.make_tensor_value_info("v0", T.FLOAT, [1])],
    [helper.make_tensor_value_info("v", T.FLOAT, [1])],
    [helper.make_tensor("M", T.INT64, [], [m_val]), helper.make_tensor("cond", T.BOOL, [], [True])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
onnx.save(m, sys.argv[1])
