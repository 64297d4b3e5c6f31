package dev.deployc;

/** A retrieved passage: its id in the bundle's index, the file it came from, its text and similarity. */
public final class Chunk {
    public final long id;
    public final String source;
    public final String text;
    public final double score;

    public Chunk(long id, String source, String text, double score) {
        this.id = id;
        this.source = source;
        this.text = text;
        this.score = score;
    }

    @Override
    public String toString() {
        return source + " #" + id + " (" + score + ")";
    }
}
