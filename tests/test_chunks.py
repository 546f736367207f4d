"""Chunk sizes: ``"auto"`` follows the model's activation width; ``in_chunks`` is one computation."""

from __future__ import annotations

import pytest
import torch

from rl8lite import Algorithm, RecurrentAlgorithm
from rl8lite.algorithms.chunks import (
    CPU_CHUNK_FLOATS,
    FALLBACK_CHUNK,
    MAX_AUTO_CHUNK,
    MIN_AUTO_CHUNK,
    activation_width,
    auto_chunk_rows,
    in_chunks,
)
from rl8lite.env import DiscreteDummyEnv
from rl8lite.examples import CartPole
from rl8lite.models import Model


def test_the_activation_width_sums_every_weight_layers_outputs() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Linear(64, 2))
    assert activation_width(mlp) == 64 + 64 + 2
    lstm = torch.nn.LSTM(8, 32, num_layers=2, bidirectional=True)
    assert activation_width(lstm) == 4 * 32 * 2 * 2
    assert activation_width(torch.nn.GRU(8, 16)) == 3 * 16
    assert activation_width(torch.nn.LSTMCell(8, 16)) == 4 * 16
    assert activation_width(torch.nn.GRUCell(8, 16)) == 3 * 16
    assert activation_width(torch.nn.Embedding(10, 12)) == 12
    # MultiheadAttention's output projection is a Linear of its own (embed_dim outputs)
    assert activation_width(torch.nn.MultiheadAttention(16, 2)) == 4 * 16 + 16
    assert activation_width(torch.nn.Conv2d(3, 8, 3)) is None


def test_auto_chunks_hold_the_same_activations_whatever_the_width() -> None:
    # the default 2x64 actor + critic (259 floats a row) and a 2x256 one (1027)
    assert auto_chunk_rows(259) == 8192
    assert auto_chunk_rows(1027) == 2048
    assert auto_chunk_rows(4 * 1027) == 512
    for width in (3, 50, 259, 700, 1027, 5000, 10**6):
        rows = auto_chunk_rows(width)
        assert rows & (rows - 1) == 0  # a power of two
        assert MIN_AUTO_CHUNK <= rows <= MAX_AUTO_CHUNK
        if MIN_AUTO_CHUNK < rows < MAX_AUTO_CHUNK:
            assert CPU_CHUNK_FLOATS / 2**0.5 <= rows * width <= CPU_CHUNK_FLOATS * 2**0.5
    assert auto_chunk_rows(None) == FALLBACK_CHUNK
    assert auto_chunk_rows(1) == MAX_AUTO_CHUNK and auto_chunk_rows(10**7) == MIN_AUTO_CHUNK


@pytest.mark.parametrize(
    "hiddens, update_rows", [((64, 64), 8192), ((256, 256), 2048), ((1024, 1024), 512)]
)
def test_an_algorithm_on_cpu_resolves_auto_from_its_model(hiddens: tuple[int, int], update_rows: int) -> None:
    algo = Algorithm(CartPole, num_envs=4, horizon=4, model_config={"hiddens": list(hiddens)})
    assert algo.update_chunk_samples == update_rows
    assert algo.recurrence.chunk_rows == update_rows
    fixed = Algorithm(CartPole, num_envs=4, horizon=4, update_chunk_size=96, collect_chunk_size=None)
    assert fixed.update_chunk_samples == 96 and fixed.recurrence.chunk_rows is None


def test_a_model_of_unknown_width_gets_the_fallback_chunk() -> None:
    class Lookup(Model):
        """Features and values from a parameter table: no weight layer to read a width from."""

        def __init__(self, observation_spec, action_spec, /) -> None:  # type: ignore[no-untyped-def]
            super().__init__(observation_spec, action_spec)
            self.table = torch.nn.Parameter(torch.zeros(3))

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.table.expand(obs.shape[0], 3)
            return out[:, :2], out[:, 2:]

    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4, model_cls=Lookup)
    assert algo.update_chunk_samples == FALLBACK_CHUNK


def test_a_recurrent_models_auto_chunk_counts_its_lstm_gates() -> None:
    algo = RecurrentAlgorithm(DiscreteDummyEnv, num_envs=4, horizon=8, seq_len=4)
    width = activation_width(algo.policy)
    assert width == 64 + 4 * 64 + 2 + 1  # encoder, LSTM cell gates, actor, critic
    assert algo.update_chunk_samples == auto_chunk_rows(width)


def test_in_chunks_concatenates_what_one_call_returns() -> None:
    x = torch.arange(10.0).reshape(10, 1)
    pair = in_chunks(lambda t: (t * 2, t + 1), x, size=3)
    assert torch.equal(pair[0], x * 2) and torch.equal(pair[1], x + 1)
    assert torch.equal(in_chunks(lambda t: t.square(), x, size=4), x.square())
    assert torch.equal(in_chunks(lambda t: t.square(), x, size=None), x.square())
