package dev.deployc;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * What a run of the pipeline gave: its outputs by name (text, retrieved chunks or a tensor), every stage's
 * values, per-stage latency, and a generate stage's figures. {@link #json()} is the whole result as the
 * runner prints it ({@code deployc-runner BUNDLE --pipeline}).
 */
public final class Result {
    private final String json;
    private final Map<String, Object> root;

    @SuppressWarnings("unchecked")
    Result(String json) {
        this.json = json;
        this.root = (Map<String, Object>) Json.parse(json);
    }

    public String json() {
        return json;
    }

    @SuppressWarnings("unchecked")
    public Map<String, Object> outputs() {
        return (Map<String, Object>) root.get("outputs");
    }

    /** A text output (a generated answer, a rendered prompt). */
    public String text(String output) {
        Object v = output(output);
        if (!(v instanceof String)) {
            throw new IllegalArgumentException("output " + output + " is not text");
        }
        return (String) v;
    }

    /** A retrieval output: the chunks, best first. */
    @SuppressWarnings("unchecked")
    public List<Chunk> chunks(String output) {
        Object v = output(output);
        if (!(v instanceof List)) {
            throw new IllegalArgumentException("output " + output + " is not a list of chunks");
        }
        List<Chunk> out = new ArrayList<>();
        for (Object o : (List<Object>) v) {
            Map<String, Object> c = (Map<String, Object>) o;
            out.add(new Chunk(((Number) c.get("id")).longValue(), (String) c.get("source"), (String) c.get("text"),
                    ((Number) c.get("score")).doubleValue()));
        }
        return Collections.unmodifiableList(out);
    }

    /** A tensor output's values as floats (its shape: {@link #shape}). */
    @SuppressWarnings("unchecked")
    public float[] floats(String output) {
        List<Object> data = (List<Object>) tensor(output).get("data");
        float[] out = new float[data.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) data.get(i)).floatValue();
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    public long[] shape(String output) {
        List<Object> shape = (List<Object>) tensor(output).get("shape");
        long[] out = new long[shape.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) shape.get(i)).longValue();
        }
        return out;
    }

    /** Every stage's outputs by stage name, then port: what the runner's JSON calls "stages". */
    @SuppressWarnings("unchecked")
    public Map<String, Object> stages() {
        return (Map<String, Object>) root.get("stages");
    }

    /** A generate stage's figures: prompt_tokens, tokens, first_token_ms, per_token_ms, prefill_ms,
     *  prefill_tokens_per_s, decode_tokens_per_s (and cancelled). */
    @SuppressWarnings("unchecked")
    public Map<String, Object> generation() {
        return (Map<String, Object>) root.get("generation");
    }

    /** True when a listener or {@link Bundle#cancel} stopped the generation before its end. */
    public boolean cancelled() {
        Map<String, Object> g = generation();
        return g != null && Boolean.TRUE.equals(g.get("cancelled"));
    }

    @SuppressWarnings("unchecked")
    private Map<String, Object> tensor(String output) {
        Object v = output(output);
        if (!(v instanceof Map) || !((Map<String, Object>) v).containsKey("dtype")) {
            throw new IllegalArgumentException("output " + output + " is not a tensor");
        }
        return (Map<String, Object>) v;
    }

    private Object output(String output) {
        Map<String, Object> outputs = outputs();
        if (!outputs.containsKey(output)) {
            throw new IllegalArgumentException("no output " + output + " (outputs: " + outputs.keySet() + ")");
        }
        return outputs.get(output);
    }
}
