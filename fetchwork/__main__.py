from fetchwork.cli import main

main()
