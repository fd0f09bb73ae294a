"""The softmax bench block the benchmark scripts share (throughput.py,
controls_search.py): 8192 rows of 4096 fp32, checked against the numpy
reference in kernels/references.py."""

BENCH = """    bench {
        kernel softmax
        reference "references.py:softmax"
        let ROWS = 8192
        let COLS = 4096
        arg x : f32[ROWS * COLS] = random(seed=5, low=-8, high=8)
        arg y : f32[ROWS * COLS] = output
        arg rows : i32 = ROWS
        arg cols : i32 = COLS
        grid (ROWS)
        block (BLOCK)
        check y rtol 1e-5 atol 1e-9
    }"""
