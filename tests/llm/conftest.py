"""Fixtures for the LLM Coder tests: a fake Messages API, a task, a plan, candidate replies."""

from __future__ import annotations

import pytest

from stitch_lsp.coders.llm.client import RetryPolicy
from stitch_lsp.coders.llm.coder import LlmConfig
from stitch_lsp.coders.llm.key import Secret
from stitch_lsp.pipeline import FusionGroup, Plan, Task, TensorSpec
from stitch_lsp.settings import Settings

from .fake_messages_api import FakeMessagesAPI

# Recognisable, so that a leak anywhere is found by grep.
FAKE_KEY = "sk-ant-api03-STITCHLEAKCANARY-0123456789abcdef"

FAST_RETRY = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05)

REFERENCE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return [2.0]
'''


@pytest.fixture
def fake_api():
    apis: list[FakeMessagesAPI] = []

    def make(*turns, api_key: str | None = FAKE_KEY) -> FakeMessagesAPI:
        api = FakeMessagesAPI(turns, api_key=api_key).__enter__()
        apis.append(api)
        return api

    yield make
    for api in apis:
        api.__exit__(None, None, None)


@pytest.fixture
def task() -> Task:
    return Task(name="relu_scale", source=REFERENCE, inputs=[TensorSpec((4096, 1024))], shape_source="get_inputs")


@pytest.fixture
def plan() -> Plan:
    group = FusionGroup(ops=["aten.relu", "aten.mul"], kind="pointwise", inputs=["x"], outputs=["out"],
                        bytes_moved=2 * 4096 * 1024 * 4, flops=2 * 4096 * 1024, floor_us=11.2)
    return Plan(task_key="k", groups=[group], device_name="NVIDIA H100 80GB HBM3", bandwidth_gbs=2950,
                peak_tflops=49, eager_kernels=2, floor_us=11.2, predicted_speedup=2.0)


@pytest.fixture
def settings() -> Settings:
    return Settings(model="claude-sonnet-4-6", rounds=3, token_budget=200_000, target_speedup=2.0)


@pytest.fixture
def key() -> Secret:
    return Secret(FAKE_KEY)


def config_for(api: FakeMessagesAPI) -> LlmConfig:
    return LlmConfig(base_url=api.base_url, retry=FAST_RETRY, timeout_s=20.0)
