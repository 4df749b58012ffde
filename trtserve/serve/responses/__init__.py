"""OpenAI's Responses API (`/v1/responses`) over the OpenAI front end's chat path, with responses
kept in the state store for `previous_response_id`, GET, DELETE and background runs."""
