"""Chart builders: plain functions from DataFrames to plotly figures (no Streamlit)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.format import human_bytes, human_tokens
from dashboard.queries import REMAINDER

METRIC_LABELS = {
    "view": ("view_tokens_p99", "p99 tokens shown to the model"),
    "raw": ("raw_tokens_p99", "p99 tokens the tool produced"),
    "bytes": ("raw_bytes_p99", "p99 bytes the tool produced"),
    "cost": ("window_cost_tokens", "window cost (tokens re-read by later LLM calls)"),
}


def ranking_bar(table: pd.DataFrame, by: str = "view") -> go.Figure:
    """Horizontal bars, largest on top, with each tool's budget marked where it has one."""
    column, label = METRIC_LABELS[by]
    fig = go.Figure()
    if table.empty:
        fig.update_layout(title="No tool calls yet")
        return fig
    data = table.iloc[::-1]  # plotly draws bottom-up
    fig.add_bar(
        x=data[column],
        y=data["tool"],
        orientation="h",
        name=label,
        text=[
            (human_bytes if by == "bytes" else human_tokens)(v) + ("" if by == "bytes" else " tokens")
            for v in data[column]
        ],
        # inside the bar's end where it fits, so a budget marker just past the end cannot cover it
        textposition="auto",
        insidetextanchor="end",
        insidetextfont={"color": "white"},
        outsidetextfont={"color": "#444"},
        cliponaxis=False,
        marker_color="#d62728",
    )
    if by in ("view", "raw") and "budget_tokens" in data and data["budget_tokens"].notna().any():
        has = data[data["budget_tokens"].notna()]
        fig.add_scatter(
            x=has["budget_tokens"],
            y=has["tool"],
            mode="markers",
            name="the tool's budget (tokens)",
            marker={"symbol": "line-ns-open", "size": 22, "line": {"width": 3}, "color": "#1f77b4"},
            hovertemplate="%{y}: budget %{x:,.0f} tokens<extra></extra>",
        )
    fig.update_layout(
        xaxis_title=label,
        yaxis_title=None,
        height=120 + 40 * len(data),
        margin={"l": 10, "r": 90, "t": 30, "b": 40},  # room for the value labels outside the bars
        legend={"orientation": "h", "y": 1.08},
        showlegend=True,
    )
    return fig


def size_histogram(hist: pd.DataFrame, pcts: dict[str, float | None], label: str, budget: float | None) -> go.Figure:
    """Calls per log-spaced size bin, with p50/p95/p99 and the budget marked."""
    fig = go.Figure()
    if hist.empty:
        fig.update_layout(title="No call with a result above zero")
        return fig
    centers = (hist["lo"] * hist["hi"]) ** 0.5
    width = (hist["hi"] - hist["lo"]) * 0.95
    fig.add_bar(x=centers, y=hist["calls"] - hist["errors"], width=width, name="calls",
                marker_color="#7f7f7f", hovertemplate="%{x:.0f}: %{y} calls<extra></extra>")  # fmt: skip
    if hist["errors"].any():  # failed calls stacked in their own colour, not mistaken for small results
        fig.add_bar(x=centers, y=hist["errors"], width=width, name="failed calls", marker_color="#ff9896",
                    hovertemplate="%{x:.0f}: %{y} failed calls<extra></extra>")  # fmt: skip
    # vertical lines as named traces, not add_vline annotations: on a log axis an annotation
    # needs log10 of its value and lands off the chart otherwise; a legend entry always shows
    top = float(hist["calls"].max())
    lines = [("p50", pcts.get("p50"), "#2ca02c", "dot"), ("p95", pcts.get("p95"), "#ff7f0e", "dot"),
             ("p99", pcts.get("p99"), "#d62728", "dot"), ("budget", budget, "#1f77b4", "solid")]  # fmt: skip
    for key, value, color, dash in lines:
        if value:
            fig.add_scatter(x=[value, value], y=[0, top * 1.05], mode="lines", name=f"{key} {human_tokens(value)}",
                            line={"color": color, "dash": dash, "width": 3 if key == "budget" else 2},
                            hovertemplate=f"{key}: %{{x:,.0f}}<extra></extra>")  # fmt: skip
    fig.update_xaxes(type="log", title=label)
    fig.update_yaxes(title="calls")
    fig.update_layout(height=380, margin={"l": 10, "r": 10, "t": 60, "b": 40}, showlegend=True, barmode="stack",
                      legend={"orientation": "h", "y": 1.15})  # fmt: skip
    return fig


def envelope_over_time(daily: pd.DataFrame, change_days: list[object], budget: float | None) -> go.Figure:
    """Daily p99 (and p50) of view tokens and raw p99, with schema changes marked."""
    fig = go.Figure()
    if daily.empty:
        fig.update_layout(title="No calls")
        return fig
    fig.add_scatter(x=daily["day"], y=daily["view_p99"], mode="lines+markers", name="view p99", line_color="#d62728")
    fig.add_scatter(x=daily["day"], y=daily["view_p50"], mode="lines", name="view p50", line_color="#2ca02c")
    fig.add_scatter(x=daily["day"], y=daily["raw_p99"], mode="lines", name="raw p99", line_dash="dot",
                    line_color="#9467bd")  # fmt: skip
    if budget:  # a trace, not add_hline: its annotation would land off a log axis
        fig.add_scatter(x=[daily["day"].min(), daily["day"].max()], y=[budget, budget], mode="lines",
                        name=f"budget {human_tokens(budget)}", line={"color": "#1f77b4", "width": 3})  # fmt: skip
    for day in change_days:
        fig.add_vline(x=pd.Timestamp(day).timestamp() * 1000, line_color="#000", line_dash="dash",
                      annotation_text="schema changed", annotation_position="top left")  # fmt: skip
    # log scale: raw p99 can be 50x the view, and a view growing 16k -> 44k must still show
    fig.update_yaxes(title="tokens (log)", type="log")
    fig.update_layout(height=380, margin={"l": 10, "r": 10, "t": 60, "b": 40}, legend={"orientation": "h", "y": 1.15})
    return fig


def context_occupancy(occ: pd.DataFrame, events: pd.DataFrame | None = None) -> go.Figure:
    """Stacked bars: for each LLM call, the window's tokens by source; a dashed line before each
    call whose input left results out (context editing, compaction)."""
    fig = go.Figure()
    if occ.empty:
        fig.update_layout(title="No LLM calls recorded in this trace")
        return fig
    sources = [s for s in occ["source"].unique() if s != REMAINDER]
    if REMAINDER in set(occ["source"]):
        sources.append(REMAINDER)
    for source in sources:
        part = occ[occ["source"] == source]
        kwargs = {"marker_color": "#c7c7c7"} if source == REMAINDER else {}
        fig.add_bar(x=part["step"], y=part["tokens"], name=source, **kwargs)
    for e in events.to_dict("records") if events is not None else []:
        what = "compacted" if e["kind"] == "compaction" else f"cleared {e['cleared_tool_uses']} tool result(s)"
        fig.add_vline(x=e["step"] - 0.5, line_dash="dash", line_color="#d62728",
                      annotation_text=what, annotation_position="top left")  # fmt: skip
    fig.update_layout(barmode="stack", height=360, margin={"l": 10, "r": 10, "t": 30, "b": 40},
                      xaxis_title="LLM call (in order)", yaxis_title="tokens in the window",
                      legend={"orientation": "h", "y": 1.15})  # fmt: skip
    return fig


def before_after(hist: pd.DataFrame) -> go.Figure:
    """Overlaid histograms of view tokens before and after a change (log x)."""
    fig = go.Figure()
    # outlined steps, one per side: bars on a log axis are hairlines and hide each other
    for side, color in (("before", "#1f77b4"), ("after", "#d62728")):
        part = hist[hist["side"] == side] if not hist.empty else hist
        empty = int(part.loc[part["lo"] == 0, "calls"].sum()) if not part.empty else 0
        part = part[part["lo"] > 0] if not part.empty else part  # a log axis has no place for 0 tokens
        if not part.empty:
            x = [*part["lo"], float(part["lo"].iloc[-1]) * 10**0.1]
            y = [*part["calls"], float(part["calls"].iloc[-1])]
            name = side + (f" ({empty:,} empty result{'' if empty == 1 else 's'} not drawn)" if empty else "")
            fig.add_scatter(x=x, y=y, name=name, mode="lines", line={"shape": "hv", "color": color, "width": 2},
                            fill="tozeroy", opacity=0.5)  # fmt: skip
    fig.update_xaxes(type="log", title="tokens shown to the model (log)")
    fig.update_layout(height=300, margin={"l": 10, "r": 10, "t": 30, "b": 40},
                      yaxis_title="calls", legend={"orientation": "h", "y": 1.15})  # fmt: skip
    return fig


def whatif_bars(table: pd.DataFrame) -> go.Figure:
    """Window cost per tool as recorded and under the what-if budgets, side by side."""
    fig = go.Figure()
    for column, name, color in (("window_cost_before", "as recorded", "#1f77b4"),
                                ("window_cost_after", "with the budgets", "#2ca02c")):  # fmt: skip
        fig.add_bar(y=table["tool"], x=table[column], name=name, orientation="h", marker_color=color,
                    text=[human_tokens(v) for v in table[column]], textposition="outside")  # fmt: skip
    fig.update_layout(barmode="group", height=120 + 60 * len(table), margin={"l": 10, "r": 40, "t": 30, "b": 40},
                      xaxis_title="window cost (tokens re-read by later LLM calls)",
                      yaxis={"autorange": "reversed"}, legend={"orientation": "h", "y": 1.1})  # fmt: skip
    return fig


def run_sizes(runs: pd.DataFrame) -> go.Figure:
    """Tool-result tokens per run, one box per service (log y: a few runs dwarf the rest)."""
    fig = go.Figure()
    for service in sorted(runs["service"].unique()) if not runs.empty else []:
        part = runs[runs["service"] == service]
        fig.add_box(y=part["result_tokens"].clip(lower=1), name=service, boxpoints="outliers")
    fig.update_yaxes(type="log", title="tool-result tokens per run (log)")
    fig.update_layout(height=360, margin={"l": 10, "r": 10, "t": 30, "b": 40}, showlegend=False)
    return fig
