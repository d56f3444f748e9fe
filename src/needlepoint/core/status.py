"""One vocabulary for what became of a sample and of a request, used by every module.

A record's `status` is one of the STATUS_* values. Request failures carry the kind the client
classified (`Reply.error_kind`); of those only a transient backend error is worth requesting again.
"""

from __future__ import annotations

DONE = "done"
BACKEND_ERROR = "backend_error"  # transient: connection, timeout, 429, 5xx after every retry
CONTEXT_TOO_LONG = "context_too_long"  # the server says the prompt exceeds the model's context
TOO_MANY_IMAGES = "too_many_images"  # the server caps the images per prompt below what the sample has
REQUEST_REJECTED = "request_rejected"  # any other 4xx: a property of the request, not of the moment
INPUT_ERROR = "input_error"  # the sample's input cannot be sent (an unreadable image, a request over the byte budget)
INTERNAL_ERROR = "internal_error"  # a fault in needlepoint's own code; the record keeps its traceback

REQUEST_FAILURES = (BACKEND_ERROR, CONTEXT_TOO_LONG, TOO_MANY_IMAGES, REQUEST_REJECTED)
FAILED = (*REQUEST_FAILURES, INPUT_ERROR, INTERNAL_ERROR)
RETRYABLE = (BACKEND_ERROR, INPUT_ERROR)  # what `--retry-failed` requests again (never an internal error)

# A run stops once this many samples ended in INTERNAL_ERROR, or INTERNAL_ERROR_SHARE of the samples
# it requests if that is fewer (but never fewer than INTERNAL_ERROR_MIN): a bug should not burn a
# whole run's requests.
INTERNAL_ERROR_LIMIT = 20
INTERNAL_ERROR_SHARE = 0.05
INTERNAL_ERROR_MIN = 5

# Parse errors: what stands in for an answer a reply did not give (record["parse_error"]).
# One rule for a reply without text (`content` null, "" or white space), in every benchmark and
# solver: with a reasoning model's thinking beside it, NO_CONTENT (its thinking ran out of tokens; no
# repair turn, solvers/default.read_reply); without, EMPTY_RESPONSE (each benchmark's `parse`). Either
# scores as a wrong answer, never as a failed request.
NO_CONTENT = "no_content"  # no text, but thinking: a reasoning model's thinking ran out of tokens
EMPTY_RESPONSE = "empty_response"  # no text and no thinking: the model answered nothing
NO_BBOX_FOUND = "no_bbox_found"  # no box in the reply (contract/boxes.py: Ref-Adv-s, the agentic grounding calls)
NO_JSON_FOUND = "no_json_found"  # MC-Bench: no JSON in the reply
BAD_SCHEMA = "bad_schema"  # MC-Bench: JSON, but not the asked-for shape
IMAGE_NOT_GIVEN = "image_not_given"  # MC-Bench: a box without the image it belongs to
# A family's token syntax (contract/grounding.py): no box and no "none" in the reply; an opening
# token without a box after it (or a group number no answer can have); a box written in another
# family's syntax than the run's (never read as if it were the run's).
NO_GROUNDING_FOUND = "no_grounding_found"
BAD_GROUNDING = "bad_grounding"
WRONG_SYNTAX = "wrong_syntax"
PARSE_ERRORS = (
    NO_CONTENT,
    EMPTY_RESPONSE,
    NO_BBOX_FOUND,
    NO_JSON_FOUND,
    BAD_SCHEMA,
    IMAGE_NOT_GIVEN,
    NO_GROUNDING_FOUND,
    BAD_GROUNDING,
    WRONG_SYNTAX,
)
