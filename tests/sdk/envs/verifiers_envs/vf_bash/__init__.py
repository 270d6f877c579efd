"""Shell arithmetic with verifiers' default harness (``bash``): the taskset ships no
harness, so its agent plays verifiers' chat program with the ``bash`` and ``edit``
tools, in the agent's runtime (a remote sandbox unless the run says otherwise)."""

import verifiers.v1 as vf


class ShellData(vf.TaskData):
    answer: int


class ShellTask(vf.Task[ShellData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(str(self.data.answer) in trace.last_reply)


class ShellConfig(vf.TasksetConfig):
    num_tasks: int = 24


class ShellTaskset(vf.Taskset[ShellTask, ShellConfig]):
    def load(self) -> list[ShellTask]:
        return [ShellTask(ShellData(id=f"mul-{i}", answer=7 * (i + 2),
                                    prompt=f"Use bash to compute 7 * {i + 2} (run "
                                           f"`echo $((7 * {i + 2}))`) and reply with it."),
                          self.config.task) for i in range(self.config.num_tasks)]


__all__ = ["ShellTaskset"]
