"""AsymSpecMiddleware: the drafter reads the conversation before the agent's own context middleware, the verifier
reads what that middleware keeps.

    agent = create_agent(ChatAsymSpec(), tools, middleware=[
        AsymSpecMiddleware(),                                   # first: it sees the state before anything edits it
        SummarizationMiddleware(model=llm, trigger=("fraction", 0.5)),
        ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=2000)]),
    ])

Before each model step it copies the state's messages into `asymspec_history` (merged by id, so messages that a
destructive middleware such as SummarizationMiddleware later removes from `messages` stay there, checkpointed
with the thread). Around the model call (outermost, being first) it hands ChatAsymSpec that history as the call's
`full_messages`; every inner middleware then edits the request as usual, and what reaches the model is the
verifier's view. Summaries written by SummarizationMiddleware are left out of the history: the drafter reads the
original messages instead. With a model other than ChatAsymSpec it does nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.graph.message import add_messages
from typing_extensions import NotRequired

from .chat_models import ChatAsymSpec

HISTORY = "asymspec_history"


class AsymSpecState(AgentState):
    asymspec_history: NotRequired[Annotated[list[AnyMessage], add_messages]]


class AsymSpecMiddleware(AgentMiddleware):
    state_schema = AsymSpecState

    def before_model(self, state: AsymSpecState, runtime) -> dict[str, Any] | None:
        return {HISTORY: [m for m in state["messages"] if not is_summary(m)]}

    async def abefore_model(self, state: AsymSpecState, runtime) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    def wrap_model_call(self, request, handler):
        return handler(self._with_full_view(request))

    async def awrap_model_call(self, request, handler):
        return await handler(self._with_full_view(request))

    @staticmethod
    def _with_full_view(request):
        if not isinstance(request.model, ChatAsymSpec):
            return request
        history = list(request.state.get(HISTORY) or [])
        known = {m.id for m in history}
        later = [m for m in request.messages if m.id not in known and not is_summary(m)]
        system = [request.system_message] if request.system_message is not None else []
        return request.override(model_settings={**request.model_settings, "full_messages": system + history + later})


def is_summary(message: BaseMessage) -> bool:
    """A summary SummarizationMiddleware put in place of the messages it removed."""
    return message.additional_kwargs.get("lc_source") == "summarization"
