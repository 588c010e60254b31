"""spec.resources.gpuProduct must be a valid label value: it becomes a nodeSelector."""

import pytest

from flashrl_api import SpecError, parse_spec


@pytest.mark.parametrize("value", ["NVIDIA-H20", "NVIDIA-H100-80GB-HBM3", "a"])
def test_label_values_accepted(value: str) -> None:
    assert parse_spec({"resources": {"gpuProduct": value}}).resources.gpu_product == value


@pytest.mark.parametrize("value", ["NVIDIA H20", "-H20", "H20/", "x" * 64])
def test_non_label_values_rejected_with_path(value: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"resources": {"gpuProduct": value}})
    assert [p.path for p in err.value.problems] == ["spec.resources.gpuProduct"]
