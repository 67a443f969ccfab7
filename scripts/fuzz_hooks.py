"""Values for the string formats the Dispatch OpenAPI document names.

The document gives most strings a pattern; the few forms a pattern cannot say
well carry a named `format`, defined in the document's descriptions:

- http-url: an http or https URL with a host
- header-name: an RFC 9110 token that is not a header Dispatch sets itself
- webhook-secret: `whsec_` and 16 to 64 bytes in base64

scripts/fuzz-api loads this module (SCHEMATHESIS_HOOKS) so that the fuzzer
generates values of these forms, as a client would send them.
"""

import base64

import schemathesis
from hypothesis import strategies as st

RESERVED = {
    "host", "content-length", "content-type", "transfer-encoding", "connection",
    "user-agent", "webhook-id", "webhook-timestamp", "webhook-signature",
    # refused alongside `auth`, which the fuzzer may send
    "authorization",
}

label = st.from_regex(r"\A[a-z][a-z0-9]{0,14}\Z")
host = st.lists(label, min_size=1, max_size=3).map(".".join)
port = st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}"))
path = st.from_regex(r"\A(/[A-Za-z0-9._~-]{0,12}){0,3}\Z")
http_url = st.builds(
    lambda scheme, h, p, rest: f"{scheme}://{h}{p}{rest}",
    st.sampled_from(["http", "https"]), host, port, path,
)
header_name = st.from_regex(r"\A[!#$%&'*+.^_`|~0-9A-Za-z-]{1,20}\Z").filter(
    lambda n: n.lower() not in RESERVED
)
webhook_secret = st.binary(min_size=16, max_size=64).map(
    lambda b: "whsec_" + base64.b64encode(b).decode()
)

schemathesis.openapi.format("http-url", http_url)
schemathesis.openapi.format("header-name", header_name)
schemathesis.openapi.format("webhook-secret", webhook_secret)
