"""The two failures callers of the inference tier handle.

`InferenceUnavailable`: the tier cannot answer now (down, deadline exceeded, model not loaded or
not ready); callers degrade (defer the embedding, recall without the dense channel or rerank).
`InferenceBusy`, one kind of it: the tier is up but did not answer within the deadline (busy); the
call degrades, but the tier is not taken for down.
`InferenceError`: the tier answered with an error (bad input, model failure); the base class, so
`except InferenceError` catches both.
"""


class InferenceError(Exception):
    """The inference tier answered with an error."""


class InferenceUnavailable(InferenceError):
    """The inference tier cannot answer now: down, deadline exceeded, or the model is not ready."""


class InferenceBusy(InferenceUnavailable):
    """The inference tier is up but did not answer within the deadline."""
