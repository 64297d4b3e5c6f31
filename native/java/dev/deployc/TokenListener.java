package dev.deployc;

/**
 * Receives a generate stage's text as it is decoded, on the thread that called {@link Bundle#run}. Pieces
 * concatenate to the stage's answer. Return false to stop the generation there (the answer is the text so
 * far); an exception thrown here stops it too and comes out of {@code run}.
 */
@FunctionalInterface
public interface TokenListener {
    boolean onToken(String piece);
}
