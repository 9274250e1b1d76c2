"""A Flower grid without Ray, for tests of Flower server apps in-process (needs the 'flower' extra)."""

from __future__ import annotations

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp


class InProcessGrid:
    """A Flower grid without Ray: each message goes straight to ``client_app`` with the context of
    its node (``nodes``: node id -> client index), which the grid keeps from one message to the
    next as Flower's simulation engine keeps each node's context across a run (``Context.state``);
    ``forget=True`` gives every message a fresh one. ``sent`` lists every send's (message type,
    client index) pairs."""

    def __init__(self, client_app: ClientApp, nodes: dict[int, int], *, forget: bool = False) -> None:
        self.client_app, self.nodes, self.forget, self.sent = client_app, nodes, forget, []
        self.contexts: dict[int, Context] = {}

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def context(self, node: int) -> Context:
        if self.forget or node not in self.contexts:
            self.contexts[node] = Context(run_id=1, node_id=node, node_config={"partition-id": self.nodes[node]},
                                          state=RecordDict(), run_config={})
        return self.contexts[node]

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        messages = list(messages)
        self.sent.append([(m.metadata.message_type, self.nodes[m.metadata.dst_node_id]) for m in messages])
        replies = []
        for i, msg in enumerate(messages):
            msg.metadata.__dict__["_message_id"] = f"{len(self.sent)}.{i}"  # the SuperLink sets it
            replies.append(self.client_app(msg, self.context(msg.metadata.dst_node_id)))
        return replies

    def trained(self) -> list[list[int]]:
        """Per send that carried train messages, the clients it trained."""
        return [sorted(k for kind, k in sent) for sent in self.sent if any(kind == "train" for kind, _ in sent)]
