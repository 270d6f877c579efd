"""Sums with a tool: an `add` tool served over MCP by a shared `vf.Toolset`."""

import verifiers.v1 as vf

from vf_tools.servers import AddToolset


class ToolData(vf.TaskData):
    answer: int


class ToolTask(vf.Task[ToolData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(str(self.data.answer) in trace.last_reply)


class ToolsConfig(vf.TasksetConfig):
    num_tasks: int = 16
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class ToolsTaskset(vf.Taskset[ToolTask, ToolsConfig]):
    def load(self) -> list[ToolTask]:
        return [ToolTask(ToolData(id=f"add-{i}", answer=3 * i + 7,
                                  prompt=f"Use the add tool: what is {3 * i} + 7?"),
                         self.config.task) for i in range(self.config.num_tasks)]

    @classmethod
    def toolsets(cls, config: ToolsConfig) -> list[vf.Toolset]:
        return [AddToolset(config.tools)]


__all__ = ["ToolsTaskset"]
