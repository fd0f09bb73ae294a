"""numpy references for the kernels' bench specs (`reference "references.py:NAME"`).

Each function takes the bench's arguments by name (arrays as float64, scalars
as numbers), its sizes and defines (HEADS, LEN, ...), and returns the checked
outputs by name, computed in float64.
"""
from __future__ import annotations

import numpy as np


def sgemm(A, B, m, n, k, **_):
    return {"C": (A.reshape(m, k) @ B.reshape(k, n)).ravel()}


def hgemm(A, B, m, n, k, C=0.0, **_):
    """C += A B (C starts at zero for split-K; it is an output otherwise)."""
    return {"C": C + (A.reshape(m, k) @ B.reshape(k, n)).ravel()}


def saxpy(n, a, x, y, **_):
    return {"y": a * x + y}


def softmax(x, rows, cols, **_):
    values = x.reshape(rows, cols)
    exp = np.exp(values - values.max(axis=1, keepdims=True))
    return {"y": (exp / exp.sum(axis=1, keepdims=True)).ravel()}


def rmsnorm(x, w, rows, cols, eps, **_):
    values = x.reshape(rows, cols)
    return {"y": (values / np.sqrt((values ** 2).mean(axis=1, keepdims=True) + eps) * w).ravel()}


def reduce_sum(x, total, **_):
    return {"total": total + x.sum(keepdims=True)}


def decode_attention(q, k, v, scale, HEADS, HEAD_DIM, LEN, **_):
    q, k, v = q.reshape(HEADS, HEAD_DIM), k.reshape(HEADS, LEN, HEAD_DIM), v.reshape(HEADS, LEN, HEAD_DIM)
    scores = np.einsum("hd,htd->ht", q, k) * scale
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return {"out": np.einsum("ht,htd->hd", p / p.sum(axis=1, keepdims=True), v).ravel()}


def flash_attention(q, k, v, scale, causal, BH, L, HEAD_DIM, **_):
    shape = (BH, L, HEAD_DIM)
    q, k, v = q.reshape(shape), k.reshape(shape), v.reshape(shape)
    hidden = np.triu(np.ones((L, L), dtype=bool), 1) if causal else np.zeros((L, L), dtype=bool)
    out = np.empty(shape)
    for h in range(BH):                      # one head at a time: L x L scores in float64
        scores = np.where(hidden, -np.inf, q[h] @ k[h].T * scale)
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[h] = (p / p.sum(axis=1, keepdims=True)) @ v[h]
    return {"o": out.ravel()}
