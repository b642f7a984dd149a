"""Both engines implement the declared `Engine` and `Session` protocols
(walkthrough/engine/protocol.py).

Checked two ways: every method and property of a protocol is on both engines' classes, each method
taking the protocol's parameters (same names, kinds and optional ones still optional); and a loaded
model and a new session of each engine are instances of the protocols, properties and data members
included. The llama.cpp engine's instances need llama-cpp-python (skipped without it); its classes
are checked anyway.
"""

from __future__ import annotations

import inspect

import pytest
from llama_support import needs_llama
from tiny_model_support import MODEL_PATH

from walkthrough.engine.engines import load_model, new_session
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session as NumpySession
from walkthrough.engine.llama.model import LlamaModel
from walkthrough.engine.llama.session import LlamaSession
from walkthrough.engine.protocol import Engine, ModelLayout, Session
from walkthrough.inspect.gguf import open_gguf

IMPLEMENTATIONS = [(Engine, Model), (Engine, LlamaModel), (Session, NumpySession),
                   (Session, LlamaSession)]


def _methods(protocol: type) -> dict[str, object]:
    """The protocol's declared methods (its properties and data members are checked on
    instances)."""
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and callable(value)}


def _accepts(implementation, declared) -> list[str]:
    """What the implementation's signature lacks of the declared one (empty when it takes every
    call)."""
    have = inspect.signature(implementation).parameters
    lacks = []
    for name, param in inspect.signature(declared).parameters.items():
        mine = have.get(name)
        if mine is None:
            lacks.append(f"parameter {name}")
        elif mine.kind != param.kind:
            lacks.append(f"{name} is {mine.kind.description}, declared {param.kind.description}")
        elif param.default is not param.empty and mine.default is param.empty:
            lacks.append(f"{name} has no default")
    return lacks


@pytest.mark.parametrize(("protocol", "cls"), IMPLEMENTATIONS, ids=lambda x: x.__qualname__)
def test_each_engine_class_has_every_declared_method_with_its_parameters(protocol, cls):
    methods = _methods(protocol)
    assert methods, "the protocol declares no method"
    for name, declared in methods.items():
        mine = inspect.getattr_static(cls, name, None)
        assert callable(mine), f"{cls.__name__} lacks the method {name}"
        assert not _accepts(mine, declared), f"{cls.__name__}.{name}: {_accepts(mine, declared)}"


def test_a_signature_that_drops_a_parameter_is_caught():
    def decode(self, sampler, max_tokens, *, stop_ids=None): ...

    def prefill(self, ids, chunk=None): ...

    assert _accepts(decode, Session.decode) == ["parameter all_logits", "parameter progress"]
    lacks = _accepts(prefill, Session.prefill)
    assert "chunk is positional or keyword, declared keyword-only" in lacks


def _check_instances(model, session) -> None:
    assert isinstance(model, Engine)
    assert isinstance(model.config, ModelLayout)
    assert isinstance(session, Session)
    assert session.model is model
    assert session.tokens == [] and session.pending is None and session.last_logits is None


def test_the_numpy_engine_model_and_session_are_an_engine_and_a_session():
    model = load_model("numpy", open_gguf(MODEL_PATH))
    _check_instances(model, new_session(model))


@needs_llama
def test_the_llama_engine_model_and_session_are_an_engine_and_a_session():
    model = load_model("llama.cpp", open_gguf(MODEL_PATH))
    try:
        session = new_session(model, n_ctx=64)
        _check_instances(model, session)
        session.close()
    finally:
        model.close()


def test_a_model_of_no_engine_gets_no_session():
    with pytest.raises(TypeError, match="no engine runs"):
        new_session(object())
