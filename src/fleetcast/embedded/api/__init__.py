"""An ``AWS::Serverless::Api`` of template.yaml, served on 127.0.0.1 the way API Gateway
serves a REST API stage with a proxy integration.

A request to ``http://127.0.0.1:<port>/<stage>/<path>`` is matched against the routes the
template's functions declare (``Events: {Type: Api}``); API Gateway's checks come first,
in its order and with its answers:

- no route for the method and path: 403 ``{"message": "Missing Authentication Token"}``;
- API key required but ``x-api-key`` missing, unknown or disabled: 403 ``Forbidden``;
- over the usage plan's throttle (a token bucket per key, rate and burst from the plan)
  or its quota: 429 ``Too Many Requests`` / ``Limit Exceeded``.

Then the function gets a REST API proxy event (payload format 1.0) built from the request,
and its ``statusCode``/``headers``/``body`` become the response; a function that fails
gives 502 ``Internal server error``. A request over API Gateway's size limits, and any
the HTTP server itself refuses, gets API Gateway's JSON too (:mod:`.server`). Keys
and usage plans live in moto's API Gateway, so ``aws apigateway get-api-keys
--include-values`` shows the key the stack exports.

Laid out like a moto service (and like :mod:`fleetcast.embedded.endpoint`): ``urls``
(the routes), ``models`` (usage plans and API keys), ``responses`` (the stage's answers,
:class:`LocalRestApi`) and ``server`` (the HTTP side).
"""

from fleetcast.embedded.api.responses import DEFAULT_PORT, LocalRestApi

__all__ = ["DEFAULT_PORT", "LocalRestApi"]
