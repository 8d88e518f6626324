"""How a convolution's output is laid out (channels-last or NCHW) and why: the plain data the Planner notes and
the fuse service reads. The template Coder decides each layout (``coders.template.conv_tail``): whether its
kernels can read the output transposed."""

from __future__ import annotations

from attrs import define

READS_CHANNELS_LAST = "in channels-last"  # in a tail kernel's note: how a candidate's notes tell it


def uses_channels_last(notes: list[str]) -> bool:
    """A candidate (by its notes) with a convolution run in channels-last."""
    return any(f" {READS_CHANNELS_LAST} through " in n for n in notes)


@define
class ConvLayout:
    """How one convolution's output is laid out, and why."""

    conv: str
    layout: str  # "channels_last" | "channels_last_3d" | "nchw"
    why: str
    tail: int = -1  # the group whose kernel reads it in channels-last (channels-last only)
    fp32: bool = False  # cuDNN's channels-last fp32 kernels are TF32 ones where PyTorch allows it (its default)

    @property
    def channels_last(self) -> bool:
        return self.layout != "nchw"

    def describe(self) -> str:
        if self.channels_last:
            tf32 = " (fp32 in channels-last: cuDNN may take TF32, as torch.backends.cudnn.allow_tf32 lets it)"
            return f"convolution in channels-last; {self.why}" + (tf32 if self.fp32 else "")
        return f"convolution in NCHW: {self.why}"
