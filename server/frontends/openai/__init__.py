"""The OpenAI-compatible front end (`tcli serve --openai-port N`): /v1/models, /v1/completions,
/v1/chat/completions (with server-sent events) and /v1/embeddings over the server's models that follow
Triton's LLM conventions, as Triton's own OpenAI front end (python/openai, Triton >= 24.11) serves
them. `app.py` is the ASGI app; the other modules are its parts."""
